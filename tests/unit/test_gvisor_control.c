/* The gVisor backend's Wait call to runsc's control server (sandbox/gvisor/control.h), against a
 * server made here that speaks as runsc 2022-12's does: an abstract stream socket named
 * runsc-sandbox.ID, bound with the name's NUL counted (or not, as later Go releases bind it), the
 * call one JSON object (Wait for the container's init, WaitPID for one of its processes), the
 * answer another; and only to a server the caller accepts by its pid. */
#define _GNU_SOURCE
#include <errno.h>
#include <jansson.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "sandbox/gvisor/control.h"

/* A listening control server for id; with_nul: the name's NUL is part of the address. */
static int listen_as_runsc(const char *id, bool with_nul)
{
        struct sockaddr_un address = {.sun_family = AF_UNIX};
        int n = snprintf(address.sun_path + 1, sizeof(address.sun_path) - 1, "runsc-sandbox.%s",
                         id);
        socklen_t length = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n +
                                       (with_nul ? 1 : 0));
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        assert_true(fd >= 0);
        assert_int_equal(bind(fd, (struct sockaddr *)&address, length), 0);
        assert_int_equal(listen(fd, 4), 0);
        return fd;
}

/* Accepts the call, checks it is the Wait call for id's container (pid 0: its init's, else
 * WaitPID's for pid, whose arguments go by their Go names), and answers with answer (NULL: hangs
 * up instead). */
static void serve_one_call(int server, const char *id, pid_t pid, const char *answer)
{
        int conn = accept4(server, NULL, NULL, SOCK_CLOEXEC);
        assert_true(conn >= 0);
        char call[512];
        ssize_t n = read(conn, call, sizeof(call));
        assert_true(n > 0);
        json_error_t error;
        json_t *object = json_loadb(call, (size_t)n, 0, &error);
        assert_non_null(object);
        const char *method = NULL, *arg = NULL;
        if (pid == 0) {
                assert_int_equal(json_unpack(object, "{s:s,s:s}", "method", &method, "arg", &arg),
                                 0);
                assert_string_equal(method, "containerManager.Wait");
        } else {
                json_int_t arg_pid = 0;
                assert_int_equal(json_unpack(object, "{s:s,s:{s:I,s:s}}", "method", &method, "arg",
                                             "PID", &arg_pid, "CID", &arg),
                                 0);
                assert_string_equal(method, "containerManager.WaitPID");
                assert_int_equal(arg_pid, pid);
        }
        assert_string_equal(arg, id);
        json_decref(object);
        if (answer != NULL)
                assert_int_equal(write(conn, answer, strlen(answer)), (ssize_t)strlen(answer));
        close(conn);
}

/* The listener here is this process: the server the tests accept. */
static bool is_this_process(pid_t pid, void *ctx)
{
        (void)ctx;
        return pid == getpid();
}

static bool is_another_process(pid_t pid, void *ctx)
{
        (void)ctx;
        return pid != getpid();
}

static int call_for_pid_and_answer(bool with_nul, pid_t pid, const char *answer, int *status)
{
        char id[64];
        snprintf(id, sizeof(id), "sandboxd-test-%d-%d", (int)getpid(), with_nul);
        int server = listen_as_runsc(id, with_nul);
        int fd = gvisor_control_send_wait(id, pid, is_this_process, NULL);
        assert_true(fd >= 0);
        serve_one_call(server, id, pid, answer);
        int rc = gvisor_control_read_wait(fd, 1000, status);
        close(fd);
        close(server);
        return rc;
}

static int call_and_answer(bool with_nul, const char *answer, int *status)
{
        return call_for_pid_and_answer(with_nul, 0, answer, status);
}

static void test_the_answer_is_the_init_s_wait_status(void **state)
{
        (void)state;
        int status = -1;
        /* exit 3 is 0x300: what the sentry's ExitStatus() says. */
        assert_int_equal(
                call_and_answer(true, "{\"success\":true,\"err\":\"\",\"result\":768}", &status),
                0);
        assert_int_equal(status, 768);
        status = -1;
        assert_int_equal(
                call_and_answer(false, "{\"success\":true,\"err\":\"\",\"result\":0}", &status), 0);
        assert_int_equal(status, 0);
}

/* A pool entry's call is for its loader's pid (WaitPID); the answer is the same shape. */
static void test_a_process_s_wait_is_waitpid(void **state)
{
        (void)state;
        int status = -1;
        /* killed by SIGKILL: 9, as the sentry's ExitStatus() says it */
        assert_int_equal(call_for_pid_and_answer(
                                 true, 3, "{\"success\":true,\"err\":\"\",\"result\":9}", &status),
                         0);
        assert_int_equal(status, 9);
        assert_int_equal(call_for_pid_and_answer(false, 3,
                                                 "{\"success\":false,\"err\":\"waiting for PID "
                                                 "3: no such process\",\"result\":0}",
                                                 &status),
                         -1);
        assert_int_equal(status, 9);
}

static void test_no_usable_answer_is_none(void **state)
{
        (void)state;
        int status = 7;
        assert_int_equal(call_and_answer(true,
                                         "{\"success\":false,\"err\":\"no such container\","
                                         "\"result\":0}",
                                         &status),
                         -1);
        assert_int_equal(call_and_answer(true, NULL, &status), -1); /* hung up */
        assert_int_equal(call_and_answer(true, "{\"success\":true,\"res", &status), -1); /* cut */
        assert_int_equal(
                call_and_answer(true, "{\"success\":true,\"err\":\"\",\"result\":-1}", &status),
                -1);
        assert_int_equal(status, 7);
}

/* The answer in two writes 100 ms apart, with a space after it: read whole, as it came. */
static void test_an_answer_in_pieces_is_read_whole(void **state)
{
        (void)state;
        char id[64];
        snprintf(id, sizeof(id), "sandboxd-test-%d-pieces", (int)getpid());
        int server = listen_as_runsc(id, true);
        int fd = gvisor_control_send_wait(id, 0, is_this_process, NULL);
        assert_true(fd >= 0);
        int conn = accept4(server, NULL, NULL, SOCK_CLOEXEC);
        assert_true(conn >= 0);
        pid_t writer = fork();
        assert_true(writer >= 0);
        if (writer == 0) {
                const char *first = "{\"success\":true,\"err\":\"\",";
                const char *rest = "\"result\":9}\n";
                if (write(conn, first, strlen(first)) < 0)
                        _exit(1);
                usleep(100 * 1000);
                _exit(write(conn, rest, strlen(rest)) < 0);
        }
        close(conn);
        int status = -1;
        assert_int_equal(gvisor_control_read_wait(fd, 2000, &status), 0);
        assert_int_equal(status, 9);
        int exit_status = -1;
        assert_int_equal(waitpid(writer, &exit_status, 0), writer);
        assert_int_equal(exit_status, 0);
        close(fd);
        close(server);
}

/* A listener the caller does not accept (anyone may bind an abstract name) gets no call. */
static void test_only_the_sandbox_s_server_gets_the_call(void **state)
{
        (void)state;
        char id[64];
        snprintf(id, sizeof(id), "sandboxd-test-%d-squatted", (int)getpid());
        int server = listen_as_runsc(id, true);
        errno = 0;
        assert_int_equal(gvisor_control_send_wait(id, 0, is_another_process, NULL), -1);
        assert_int_equal(errno, EPERM);
        close(server);
}

static void test_no_server_is_no_call(void **state)
{
        (void)state;
        errno = 0;
        assert_int_equal(
                gvisor_control_send_wait("sandboxd-test-nobody-listens", 0, is_this_process, NULL),
                -1);
        assert_int_equal(errno, ECONNREFUSED);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_the_answer_is_the_init_s_wait_status),
                cmocka_unit_test(test_a_process_s_wait_is_waitpid),
                cmocka_unit_test(test_no_usable_answer_is_none),
                cmocka_unit_test(test_an_answer_in_pieces_is_read_whole),
                cmocka_unit_test(test_only_the_sandbox_s_server_gets_the_call),
                cmocka_unit_test(test_no_server_is_no_call),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
