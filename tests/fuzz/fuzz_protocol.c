/* libFuzzer harness for the engine protocol's decoder (protocol/protocol.h), the parser the engine
 * (root) runs on every record the API process sends. Whatever the bytes, sbx_message_decode must
 * either refuse them with EBADMSG or accept them; ASan and UBSan catch any read outside the input.
 *
 * An accepted message must also survive the round trip: the matching encoder re-encodes the
 * decoded message, and since the encoding is canonical (flags are 0 or 1, every length is
 * exact, no byte is left over) the result must be the input byte for byte, and decode again. */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "protocol/protocol.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fail(const char *what, const struct sbx_error *err)
{
        fprintf(stderr, "fuzz_protocol: %s: %s\n", what, err ? err->message : "");
        abort();
}

static int encode_again(const struct sbx_message *message, void **out, size_t *out_len,
                        struct sbx_error *err)
{
        uint64_t request_id = message->header.request_id;
        switch ((enum sbx_message_type)message->header.type) {
        case SBX_MESSAGE_RUN:
                return sbx_message_encode_run(request_id, message->body.run.execution_id,
                                              &message->body.run.request, out, out_len, err);
        case SBX_MESSAGE_RESULT:
                return sbx_message_encode_result(request_id, &message->body.result, out, out_len,
                                                 err);
        case SBX_MESSAGE_STATS_REPLY:
                return sbx_message_encode_stats_reply(request_id, &message->body.stats, out,
                                                      out_len, err);
        case SBX_MESSAGE_REFUSED:
                return sbx_message_encode_refused(request_id, message->body.refused.reason,
                                                  message->body.refused.detail, out, out_len, err);
        case SBX_MESSAGE_CONFIG:
                return sbx_message_encode_config(message->body.config.text,
                                                 message->body.config.size, out, out_len, err);
        case SBX_MESSAGE_SESSION:
        case SBX_MESSAGE_SESSION_REPLY:
        case SBX_MESSAGE_SESSION_ENDED:
        case SBX_MESSAGE_SESSION_EVENT:
                return sbx_message_encode_session((enum sbx_message_type)message->header.type,
                                                  request_id, &message->body.session, out, out_len,
                                                  err);
        case SBX_MESSAGE_CANCEL:
        case SBX_MESSAGE_PING:
        case SBX_MESSAGE_PONG:
        case SBX_MESSAGE_STATS:
                return sbx_message_encode_empty((enum sbx_message_type)message->header.type,
                                                request_id, out, out_len, err);
        }
        fail("decoded a message of an unknown type", NULL);
        return -1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        /* Static: a RUN holds pointer arrays for every file, arg and env entry (a few KiB). */
        static struct sbx_message message, again;
        struct sbx_error err = {0};
        if (sbx_message_decode(data, size, &message, &err) < 0) {
                if (err.code != EBADMSG)
                        fail("refused with a code other than EBADMSG", &err);
                return 0;
        }

        void *encoded = NULL;
        size_t encoded_len = 0;
        if (encode_again(&message, &encoded, &encoded_len, &err) < 0)
                fail("a decoded message does not encode again", &err);
        if (encoded_len != size || memcmp(encoded, data, size) != 0)
                fail("re-encoding a decoded message changed its bytes", NULL);
        if (sbx_message_decode(encoded, encoded_len, &again, &err) < 0)
                fail("a re-encoded message does not decode", &err);
        if (again.header.type != message.header.type ||
            again.header.request_id != message.header.request_id)
                fail("a re-encoded message has another header", NULL);
        free(encoded);
        return 0;
}
