#include "model/limits.h"

#include <string.h>

#include "util/cleanup.h"

#define SBX_LIMIT_FIELD(member_, type, ...)                                                        \
        {.member = #member_,                                                                       \
         .offset = offsetof(struct sbx_limits, member_),                                           \
         .size = sizeof(type),                                                                     \
         __VA_ARGS__},

const struct sbx_limit_field sbx_limit_fields[SBX_LIMIT_COUNT] = {SBX_LIMITS(SBX_LIMIT_FIELD)};

#define SBX_LIMIT_CHECK_TYPE(member, type, ...)                                                    \
        _Static_assert(sizeof(type) == 4 || sizeof(type) == 8, #member ": u32 or u64");
SBX_LIMITS(SBX_LIMIT_CHECK_TYPE)

const struct sbx_limit_field *sbx_limit_field_find(const char *name)
{
        for (size_t i = 0; i < SBX_LIMIT_COUNT; i++)
                if (strcmp(sbx_limit_fields[i].name, name) == 0)
                        return &sbx_limit_fields[i];
        return NULL;
}

uint64_t sbx_limit_get(const struct sbx_limits *limits, const struct sbx_limit_field *field)
{
        const char *at = (const char *)limits + field->offset;
        if (field->size == sizeof(uint32_t)) {
                uint32_t value;
                memcpy(&value, at, sizeof(value));
                return value;
        }
        uint64_t value;
        memcpy(&value, at, sizeof(value));
        return value;
}

void sbx_limit_set(struct sbx_limits *limits, const struct sbx_limit_field *field, uint64_t value)
{
        char *at = (char *)limits + field->offset;
        if (field->size == sizeof(uint32_t)) {
                uint32_t narrow = (uint32_t)value;
                memcpy(at, &narrow, sizeof(narrow));
        } else {
                memcpy(at, &value, sizeof(value));
        }
}

uint64_t sbx_limit_api_min(const struct sbx_limit_field *field)
{
        return field->min / field->unit + (field->min % field->unit != 0);
}

bool sbx_limits_valid(const struct sbx_limits *limits, const char **field)
{
        for (size_t i = 0; i < SBX_LIMIT_COUNT; i++) {
                uint64_t value = sbx_limit_get(limits, &sbx_limit_fields[i]);
                if (value < sbx_limit_fields[i].min || value > sbx_limit_fields[i].max) {
                        if (field != NULL)
                                *field = sbx_limit_fields[i].name;
                        return false;
                }
        }
        return true;
}

void sbx_limits_default(struct sbx_limits *limits)
{
        *limits = (struct sbx_limits){0};
        for (size_t i = 0; i < SBX_LIMIT_COUNT; i++)
                sbx_limit_set(limits, &sbx_limit_fields[i], sbx_limit_fields[i].fallback);
}
