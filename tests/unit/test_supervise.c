/* The supervisor's streamed output (on_output): every kept byte handed out once, in order, and
 * nothing past the cap; and in batches, so that a program writing a byte at a time does not cost
 * an event per write. Its stdin: fed whole, then closed, or held open (stdin_held). With
 * end_is_final, the output is what the pipes hold at the end, not what comes to end of file. A
 * forked child plays the program: it writes into pipes and exits. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "sandbox/supervise.h"
#include "util/buffer.h"
#include "util/time.h"

struct collected {
        char data[2][1 << 16];
        size_t len[2];
        int calls;
};

static void collect(void *ctx, int stream, const void *data, size_t len)
{
        struct collected *c = ctx;
        int i = stream == 1 ? 0 : 1;
        assert_true(c->len[i] + len <= sizeof(c->data[i]));
        memcpy(c->data[i] + c->len[i], data, len);
        c->len[i] += len;
        c->calls++;
}

static pid_t child;

static int kill_child(void *ctx, struct sbx_error *err)
{
        (void)ctx;
        (void)err;
        kill(child, SIGKILL);
        return 0;
}

/* Makes the pipes of every run (stdout, stderr, and the end pipe, whose write end the program
 * holds until it exits) and forks the child that plays the program: 0 in the child. */
static pid_t fork_program(int out[2], int errp[2], int end[2])
{
        assert_int_equal(pipe2(out, O_CLOEXEC), 0);
        assert_int_equal(pipe2(errp, O_CLOEXEC), 0);
        assert_int_equal(pipe2(end, O_CLOEXEC), 0);
        child = fork();
        assert_true(child >= 0);
        return child;
}

/* end_next's script: the fds it names in turn (each with its finality), then -1. */
struct end_script {
        int asked;
        int next[2];
        bool final[2];
};

static int scripted_end_next(void *ctx, bool *final)
{
        struct end_script *script = ctx;
        int i = script->asked++;
        if (i >= 2 || script->next[i] < 0)
                return -1;
        *final = script->final[i];
        return script->next[i];
}

/* Runs the supervisor over the child fork_program made (the parent's ends of its pipes), with
 * stdout and stderr handed to c when it is not NULL and the run's end told by script when that
 * is not NULL; returns how long that took. */
static uint64_t supervise_child(int out[2], int errp[2], int end[2], bool end_is_final, size_t cap,
                                struct collected *c, struct end_script *script, struct sbx_run *run)
{
        close(out[1]);
        close(errp[1]);
        close(end[1]);
        uint64_t start = sbx_now_us();
        struct sbx_supervise params = {
                .stdin_fd = -1,
                .stdout_fd = out[0],
                .stderr_fd = errp[0],
                .end_fd = end[0],
                .end_is_final = end_is_final,
                .deadline_us = start + 20 * 1000 * 1000,
                .output_cap = cap,
                .kill = kill_child,
                .on_output = c != NULL ? collect : NULL,
                .output_ctx = c,
                .end_next = script != NULL ? scripted_end_next : NULL,
                .end_ctx = script,
        };
        struct sbx_error err = {0};
        assert_int_equal(sbx_supervise(&params, run, &err), 0);
        uint64_t elapsed = sbx_now_us() - start;
        close(end[0]);
        return elapsed;
}

/* Runs the supervisor over a child that writes n single bytes to stdout, each its own write()
 * (pause_us apart), and "err" to stderr. */
static void supervise_writer(size_t n, unsigned pause_us, size_t cap, struct collected *c,
                             struct sbx_run *run, uint64_t *elapsed_us)
{
        int out[2], errp[2], end[2];
        if (fork_program(out, errp, end) == 0) {
                for (size_t i = 0; i < n; i++) {
                        char byte = (char)('a' + i % 26);
                        if (write(out[1], &byte, 1) != 1)
                                _exit(1);
                        if (pause_us > 0)
                                usleep(pause_us);
                }
                if (write(errp[1], "err", 3) != 3)
                        _exit(1);
                _exit(0); /* end[1] closes: the run is over */
        }
        *elapsed_us = supervise_child(out, errp, end, false, cap, c, NULL, run);
        waitpid(child, NULL, 0);
}

static void test_every_kept_byte_once_in_order(void **state)
{
        (void)state;
        static struct collected c;
        memset(&c, 0, sizeof(c));
        struct sbx_run run = {0};
        uint64_t elapsed;
        supervise_writer(20000, 0, 1 << 20, &c, &run, &elapsed);
        assert_int_equal(c.len[0], 20000);
        assert_int_equal(run.out.len, 20000);
        assert_memory_equal(c.data[0], run.out.data, 20000);
        assert_int_equal(c.len[1], 3);
        assert_memory_equal(c.data[1], "err", 3);
        /* 20000 writes: one batch per 4 KiB, or per 5 ms, and the last of each stream. */
        assert_true((uint64_t)c.calls <= 20000 / 4096 + elapsed / 5000 + 4);
        sbx_buffer_free(&run.out);
        sbx_buffer_free(&run.err);
}

static void test_slow_writes_are_batched_not_delayed(void **state)
{
        (void)state;
        static struct collected c;
        memset(&c, 0, sizeof(c));
        struct sbx_run run = {0};
        uint64_t elapsed;
        /* 200 bytes, 1 ms apart: some 200 ms; at most one batch per 5 ms of it. */
        supervise_writer(200, 1000, 1 << 20, &c, &run, &elapsed);
        assert_int_equal(c.len[0], 200);
        assert_memory_equal(c.data[0], run.out.data, 200);
        assert_true((uint64_t)c.calls <= elapsed / 5000 + 4);
        /* ... yet it streamed: more than one batch came while it ran. */
        assert_true(c.calls > 3);
        sbx_buffer_free(&run.out);
        sbx_buffer_free(&run.err);
}

static void test_nothing_past_the_cap(void **state)
{
        (void)state;
        static struct collected c;
        memset(&c, 0, sizeof(c));
        struct sbx_run run = {0};
        uint64_t elapsed;
        supervise_writer(5000, 0, 1000, &c, &run, &elapsed);
        assert_true(run.output_limit);
        assert_int_equal(run.out.len, 1000);
        assert_int_equal(c.len[0], 1000);
        assert_memory_equal(c.data[0], run.out.data, 1000);
        sbx_buffer_free(&run.out);
        sbx_buffer_free(&run.err);
}

/* A child reads the 3 bytes of its stdin, then says on stdout whether the end of file came
 * within 200 ms ("eof") or not ("held"). */
static void expect_stdin_end(bool held, const char *said)
{
        int in[2], out[2], errp[2], end[2];
        assert_int_equal(pipe2(in, O_CLOEXEC), 0);
        if (fork_program(out, errp, end) == 0) {
                close(in[1]); /* the supervisor's end: its close is the end of file */
                char got[3];
                size_t n = 0;
                while (n < sizeof(got)) {
                        ssize_t r = read(in[0], got + n, sizeof(got) - n);
                        if (r <= 0)
                                _exit(1);
                        n += (size_t)r;
                }
                struct pollfd pfd = {.fd = in[0], .events = POLLIN};
                char more;
                bool eof = poll(&pfd, 1, 200) == 1 && read(in[0], &more, 1) == 0;
                const char *answer = memcmp(got, "abc", 3) != 0 ? "bad" : eof ? "eof" : "held";
                if (write(out[1], answer, strlen(answer)) < 0)
                        _exit(1);
                _exit(0);
        }
        close(in[0]);
        close(out[1]);
        close(errp[1]);
        close(end[1]);
        assert_int_equal(fcntl(in[1], F_SETFL, O_NONBLOCK), 0);
        struct sbx_supervise params = {
                .stdin_fd = in[1],
                .stdin_data = "abc",
                .stdin_size = 3,
                .stdin_held = held,
                .stdout_fd = out[0],
                .stderr_fd = errp[0],
                .end_fd = end[0],
                .deadline_us = sbx_now_us() + 20 * 1000 * 1000,
                .output_cap = 1 << 10,
                .kill = kill_child,
        };
        struct sbx_run run = {0};
        struct sbx_error err = {0};
        assert_int_equal(sbx_supervise(&params, &run, &err), 0);
        close(end[0]);
        waitpid(child, NULL, 0);
        assert_int_equal(run.out.len, strlen(said));
        assert_memory_equal(run.out.data, said, strlen(said));
        sbx_buffer_free(&run.out);
        sbx_buffer_free(&run.err);
}

/* A UML guest's console hangs up at its stdin's end of file, dropping what the guest has yet to
 * read (sandbox/uml/uml.c): held, the pipe stays open once written, until the run is over. */
static void test_stdin_ends_once_written_unless_held(void **state)
{
        (void)state;
        expect_stdin_end(false, "eof");
        expect_stdin_end(true, "held");
}

/* gVisor's Wait answer (end_is_final): the run is over once end_fd is readable, and its output
 * is what the pipes hold then, however long another holder of their write ends (runsc) keeps
 * them open. Here the child ends the run after writing 200000 bytes into a stdout pipe made to
 * hold them all (more than one read's worth is left there at the end), then keeps the pipes open
 * for 10 s. */
static void test_end_is_final_takes_what_the_pipes_hold(void **state)
{
        (void)state;
        enum { OUT_BYTES = 200000 };
        int out[2], errp[2], end[2];
        if (fork_program(out, errp, end) == 0) {
                static char data[OUT_BYTES];
                memset(data, 'x', sizeof(data));
                if (fcntl(out[1], F_SETPIPE_SZ, 1 << 20) < 0)
                        _exit(1);
                size_t done = 0;
                while (done < sizeof(data)) {
                        ssize_t w = write(out[1], data + done, sizeof(data) - done);
                        if (w <= 0)
                                _exit(1);
                        done += (size_t)w;
                }
                if (write(errp[1], "err", 3) != 3 || write(end[1], "E", 1) != 1)
                        _exit(1);
                sleep(10);
                _exit(0);
        }
        struct sbx_run run = {0};
        uint64_t elapsed = supervise_child(out, errp, end, true, 1 << 20, NULL, NULL, &run);
        kill(child, SIGKILL);
        waitpid(child, NULL, 0);
        assert_true(elapsed < 5 * 1000 * 1000);
        assert_false(run.wall_timeout);
        assert_false(run.output_limit);
        assert_int_equal(run.out.len, OUT_BYTES);
        assert_int_equal(run.err.len, 3);
        assert_memory_equal(run.err.data, "err", 3);
        sbx_buffer_free(&run.out);
        sbx_buffer_free(&run.err);
}

/* An end that end_next does not take as the run's (no usable WaitPID answer) hands the run to
 * another final end (the Wait call for the container's init), and that one's to a last one that
 * is not final (runsc's exit): the loop goes on to it, reading the pipes to end of file, so that
 * what the program writes after the first two is kept. */
static void test_an_end_not_taken_hands_over_to_the_next(void **state)
{
        (void)state;
        int out[2], errp[2], end[2], second[2], fallback[2];
        assert_int_equal(pipe2(second, O_CLOEXEC), 0);
        assert_int_equal(pipe2(fallback, O_CLOEXEC), 0);
        if (fork_program(out, errp, end) == 0) {
                if (write(out[1], "a", 1) != 1 || write(end[1], "E", 1) != 1 ||
                    write(second[1], "E", 1) != 1)
                        _exit(1);
                usleep(100 * 1000);
                _exit(write(out[1], "b", 1) != 1); /* fallback[1] closes: runsc has exited */
        }
        close(second[1]);
        close(fallback[1]);
        struct end_script script = {.next = {second[0], fallback[0]}, .final = {true, false}};
        struct sbx_run run = {0};
        supervise_child(out, errp, end, true, 1 << 10, NULL, &script, &run);
        waitpid(child, NULL, 0);
        close(second[0]);
        close(fallback[0]);
        assert_int_equal(script.asked, 2);
        assert_int_equal(run.out.len, 2);
        assert_memory_equal(run.out.data, "ab", 2);
        sbx_buffer_free(&run.out);
        sbx_buffer_free(&run.err);
}

/* A final end that end_next takes (the init's answer after the WaitPID call found nothing) ends
 * the run with what the pipes hold then: what comes later is not the program's. */
static void test_a_handed_over_final_end_ends_the_run(void **state)
{
        (void)state;
        int out[2], errp[2], end[2], second[2];
        assert_int_equal(pipe2(second, O_CLOEXEC), 0);
        if (fork_program(out, errp, end) == 0) {
                if (write(out[1], "a", 1) != 1 || write(end[1], "E", 1) != 1)
                        _exit(1);
                usleep(50 * 1000);
                if (write(out[1], "b", 1) != 1 || write(second[1], "E", 1) != 1)
                        _exit(1);
                usleep(100 * 1000);
                _exit(write(out[1], "c", 1) != 1);
        }
        close(second[1]);
        struct end_script script = {.next = {second[0], -1}, .final = {true, false}};
        struct sbx_run run = {0};
        supervise_child(out, errp, end, true, 1 << 10, NULL, &script, &run);
        waitpid(child, NULL, 0);
        close(second[0]);
        assert_int_equal(script.asked, 2);
        assert_int_equal(run.out.len, 2);
        assert_memory_equal(run.out.data, "ab", 2);
        sbx_buffer_free(&run.out);
        sbx_buffer_free(&run.err);
}

int main(void)
{
        signal(SIGPIPE, SIG_IGN); /* the killed writer's pipes */
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_every_kept_byte_once_in_order),
                cmocka_unit_test(test_slow_writes_are_batched_not_delayed),
                cmocka_unit_test(test_nothing_past_the_cap),
                cmocka_unit_test(test_stdin_ends_once_written_unless_held),
                cmocka_unit_test(test_end_is_final_takes_what_the_pipes_hold),
                cmocka_unit_test(test_an_end_not_taken_hands_over_to_the_next),
                cmocka_unit_test(test_a_handed_over_final_end_ends_the_run),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
