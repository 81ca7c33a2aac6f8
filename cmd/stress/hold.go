//go:build linux && cgo

package main

// The holding is C, and Go only parses the flags and then hands its main
// goroutine to stress_run for good. The reason is the Go runtime's own
// threads: when it needs a new M and clone fails, it aborts the process
// ("pthread_create failed" / "failed to create new OS thread"), and
// exhausting the PID budget is this program's purpose. So:
//
//   - No held thread or child comes from the runtime: held threads are
//     pthread_create'd (a 64 KiB stack, named stress-thread, parked in
//     pause() with every signal blocked) and children are fork()ed (named
//     stress-proc, single-threaded, parked in pause()), both from C, where
//     a failure is an error code to count.
//   - In steady state no Go code runs. The main goroutine sits in one cgo
//     call (the loop below: creating, retrying, printing, waiting for a
//     signal on a self-pipe), GOMAXPROCS is 1 and GC is off (no GC cycle,
//     no forced GC, whose time trigger is off with the GC percent below 0,
//     no background workers to wake; memory is mmap'd by C, not taken from
//     the Go heap), and GOMAXPROCS set by hand stops the runtime's
//     periodic re-reading of the CPU limit. Nothing makes a goroutine
//     runnable: no timers, no os/signal, and the runtime's handler for
//     SIGCHLD returns at once without os/signal. The only thing the runtime
//     then does is what it does for every long cgo call: sysmon takes the P
//     away from the calling M and hands it to another M, which finds
//     nothing to run and parks. That M must already exist, so warmThreads
//     makes spare Ms before anything is held: the runtime keeps idle Ms for
//     reuse and frees one only when a goroutine locked to it exits (none
//     is), so startm finds one and never reaches clone. With all Ps idle
//     afterwards, sysmon sleeps.
//   - SIGTERM and SIGINT are taken from the runtime (a C handler with
//     SA_ONSTACK, as cgo requires) so that they reach the loop instead of
//     killing the process with a signal: the loop kills and reaps the
//     children and returns, and main exits 0. The handler is installed
//     first thing in main; a signal before that, while the runtime starts,
//     ends the process as it ends any Go program, with nothing held yet.

/*
#cgo CFLAGS: -O2 -Wall
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

#define STRESS_SECOND 1000000000LL
// A held thread only runs pause(): 64 KiB is plenty, and little of it is
// ever touched.
#define STRESS_THREAD_STACK (64 * 1024)
// Memory is mapped and touched in chunks so that a large --memory does not
// hold up the status lines, and so that under strict overcommit what could
// be had is held.
#define STRESS_MEMORY_CHUNK (16LL << 20)
// Over --ramp, memory grows in steps of this size (the last one may be
// smaller): a mapping per step keeps the process far below the kernel's
// vm.max_map_count, and a wake-up per step costs nothing at any rate.
#define STRESS_MEMORY_STEP (1LL << 20)

typedef struct {
	int64_t procs, threads, memory, ramp_ns, hold_ns, drain_ns;
} stress_spec;

static int stress_stop_r = -1, stress_stop_w = -1;
static volatile sig_atomic_t stress_stopping, stress_stop_signal;

static void stress_on_stop(int sig) {
	int saved = errno;
	char c = (char)sig;
	if (!stress_stopping) stress_stop_signal = sig;
	stress_stopping = 1;
	if (write(stress_stop_w, &c, 1) < 0) {
		// Full pipe: a wake-up is already pending.
	}
	errno = saved;
}

// stress_install_stop routes SIGTERM and SIGINT to the loop, and ignores
// SIGPIPE: a reader that went away must not end the holding.
static int stress_install_stop(void) {
	int fds[2];
	struct sigaction sa;
	if (pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) return errno;
	stress_stop_r = fds[0];
	stress_stop_w = fds[1];
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = stress_on_stop;
	sa.sa_flags = SA_ONSTACK | SA_RESTART;
	sigfillset(&sa.sa_mask);
	if (sigaction(SIGTERM, &sa, NULL) != 0 || sigaction(SIGINT, &sa, NULL) != 0) return errno;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = SIG_IGN;
	sa.sa_flags = SA_ONSTACK;
	if (sigaction(SIGPIPE, &sa, NULL) != 0) return errno;
	return 0;
}

static int64_t stress_now(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * STRESS_SECOND + ts.tv_nsec;
}

static void stress_sleep_until(int64_t t) {
	struct timespec ts = {.tv_sec = t / STRESS_SECOND, .tv_nsec = t % STRESS_SECOND};
	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
	}
}

// stress_thread_started is posted by each new held thread once it has
// named itself, so that a thread counted as held is one that runs, under
// its name.
static sem_t stress_thread_started;

static void *stress_thread_main(void *arg) {
	(void)arg;
	prctl(PR_SET_NAME, "stress-thread", 0, 0, 0);
	sem_post(&stress_thread_started);
	// Every signal is blocked (inherited from stress_start_thread): only the
	// process's exit ends this thread.
	for (;;) pause();
	return NULL;
}

// stress_start_thread starts one held thread and returns 0, or
// pthread_create's error (EAGAIN when clone fails for want of a PID).
static int stress_start_thread(pthread_attr_t *attr) {
	sigset_t all, old;
	pthread_t t;
	int err;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	err = pthread_create(&t, attr, stress_thread_main, NULL);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (err == 0) {
		while (sem_wait(&stress_thread_started) != 0 && errno == EINTR) {
		}
	}
	return err;
}

// stress_child_main is a held child. It inherited the Go runtime's signal
// handlers and every signal blocked; it resets them to the defaults (so
// SIGTERM kills it), dies with its parent, drops the descriptors (so that
// nobody waits for their EOF), and parks. Async-signal-safe calls only:
// the parent has other threads.
static void stress_child_main(pid_t parent) {
	struct sigaction dfl;
	sigset_t none;
	int s, fd;
	memset(&dfl, 0, sizeof dfl);
	dfl.sa_handler = SIG_DFL;
	for (s = 1; s < NSIG; s++) sigaction(s, &dfl, NULL);
	prctl(PR_SET_NAME, "stress-proc", 0, 0, 0);
	prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
	// The parent may have died before PR_SET_PDEATHSIG took effect.
	if (getppid() != parent) _exit(0);
	if (syscall(SYS_close_range, 0U, ~0U, 0U) != 0) {
		for (fd = 0; fd < 1024; fd++) close(fd);
	}
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	for (;;) pause();
}

// stress_start_proc forks one held child and returns its PID, or -1 (with
// EAGAIN when fork fails for want of a PID).
static pid_t stress_start_proc(void) {
	sigset_t all, old;
	pid_t parent = getpid(), pid;
	// Blocked across fork, so that no signal reaches the child before it
	// has replaced the Go runtime's handlers.
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	pid = fork();
	if (pid == 0) stress_child_main(parent);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return pid;
}

// stress_grow_memory maps up to want more bytes (a chunk at most), touched,
// and returns how many, or 0 if the mapping failed.
static int64_t stress_grow_memory(int64_t want, long page) {
	int64_t n = want < STRESS_MEMORY_CHUNK ? want : STRESS_MEMORY_CHUNK, off;
	volatile char *p = mmap(NULL, (size_t)n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED) return 0;
	// Children get none of it: fork then copies no page tables for it,
	// however much is held.
	madvise((void *)p, (size_t)n, MADV_DONTFORK);
	// One call faults the whole chunk in, far faster than a fault per page;
	// where it fails (before Linux 5.14) the pages are written one by one.
	if (madvise((void *)p, (size_t)n, MADV_POPULATE_WRITE) != 0) {
		for (off = 0; off < n; off += page) p[off] = 1;
	}
	return n;
}

// stress_ramp_target is how many of want are due elapsed into a ramp of
// ramp_ns: want * elapsed / ramp, rounded down.
static int64_t stress_ramp_target(int64_t want, int64_t elapsed, int64_t ramp) {
	if (ramp <= 0 || elapsed >= ramp) return want;
	if (elapsed <= 0) return 0;
	return (int64_t)((__int128)want * elapsed / ramp);
}

// stress_memory_steps is how many ramp steps of STRESS_MEMORY_STEP make
// want bytes, the last one partial.
static int64_t stress_memory_steps(int64_t want) {
	return want / STRESS_MEMORY_STEP + (want % STRESS_MEMORY_STEP != 0);
}

// stress_memory_target is how many of want bytes are due elapsed into a ramp
// of ramp_ns: whole steps, as stress_ramp_target counts them, at most want.
static int64_t stress_memory_target(int64_t want, int64_t elapsed, int64_t ramp) {
	int64_t total = stress_memory_steps(want);
	int64_t steps = stress_ramp_target(total, elapsed, ramp);
	return steps >= total ? want : steps * STRESS_MEMORY_STEP;
}

// stress_due is when the next of want (held so far) is to be started: its
// ramp step, and not before retry.
static int64_t stress_due(int64_t held, int64_t want, int64_t start, int64_t ramp, int64_t retry) {
	int64_t due = start;
	if (held >= want) return INT64_MAX;
	if (ramp > 0) due = start + (int64_t)(((__int128)(held + 1) * ramp + want - 1) / want);
	return due > retry ? due : retry;
}

static void stress_write(const char *buf, int n);

static void stress_print(int64_t procs, int64_t threads, int64_t failed, int64_t memory) {
	char buf[160];
	int n = snprintf(buf, sizeof buf, "procs=%lld threads=%lld failed=%lld memory=%lld\n",
		(long long)procs, (long long)threads, (long long)failed, (long long)memory);
	stress_write(buf, n);
}

// stress_write writes n bytes of buf to stdout.
static void stress_write(const char *buf, int n) {
	const char *p = buf;
	while (n > 0) {
		ssize_t w = write(1, p, (size_t)n);
		if (w < 0 && errno == EINTR) continue;
		if (w <= 0) return; // a stalled or closed stdout drops the line
		p += w;
		n -= (int)w;
	}
}

static void stress_reap(pid_t *pids, int64_t *n) {
	int status;
	pid_t p;
	int64_t i;
	while ((p = waitpid(-1, &status, WNOHANG)) > 0) {
		for (i = 0; i < *n; i++) {
			if (pids[i] == p) {
				pids[i] = pids[--*n];
				break;
			}
		}
	}
}

// stress_run holds what s asks for until s.hold_ns (0: forever) or a stop
// signal, printing the status line every second, then kills and reaps its
// children. It returns 0, or an errno for a failure to set up.
static int stress_run(stress_spec s) {
	pthread_attr_t attr;
	pid_t *pids = NULL;
	int64_t procs = 0, threads = 0, failed = 0, memory = 0, i;
	int64_t proc_retry = 0, thread_retry = 0, memory_retry = 0;
	int64_t start, hold_end, next_print, now;
	long page = sysconf(_SC_PAGESIZE);
	int printed = 0;

	if (s.procs > 0 && (pids = calloc((size_t)s.procs, sizeof *pids)) == NULL) return ENOMEM;
	if (sem_init(&stress_thread_started, 0, 0) != 0) return errno;
	if (pthread_attr_init(&attr) != 0 ||
		pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED) != 0 ||
		pthread_attr_setstacksize(&attr, STRESS_THREAD_STACK) != 0) {
		free(pids);
		return EINVAL;
	}
	start = stress_now();
	hold_end = s.hold_ns > 0 ? start + s.hold_ns : INT64_MAX;
	next_print = start + STRESS_SECOND;

	while (!stress_stopping) {
		int64_t want_procs, want_threads, want_memory, wake;
		int progress, caught_up;
		struct timespec timeout;
		struct pollfd pfd;

		now = stress_now();
		if (now >= hold_end) break;
		stress_reap(pids, &procs);

		// Work until the next status line is due, a step of each kind in
		// turn, so that memory, threads and children grow at once.
		do {
			// What fails is tried again when the next line is printed, so
			// that while the PID budget is spent every line counts one more
			// failure of each kind that is short.
			int64_t retry = now < next_print ? next_print : next_print + STRESS_SECOND;
			progress = 0;
			want_memory = stress_memory_target(s.memory, now - start, s.ramp_ns);
			if (memory < want_memory && now >= memory_retry) {
				int64_t n = stress_grow_memory(want_memory - memory, page);
				if (n > 0) {
					memory += n;
					progress = 1;
				} else {
					memory_retry = retry;
				}
			}
			want_threads = stress_ramp_target(s.threads, now - start, s.ramp_ns);
			if (threads < want_threads && now >= thread_retry) {
				if (stress_start_thread(&attr) == 0) {
					threads++;
					progress = 1;
				} else {
					failed++;
					thread_retry = retry;
				}
			}
			want_procs = stress_ramp_target(s.procs, now - start, s.ramp_ns);
			if (procs < want_procs && now >= proc_retry) {
				pid_t pid = stress_start_proc();
				if (pid > 0) {
					pids[procs++] = pid;
					progress = 1;
				} else {
					failed++;
					proc_retry = retry;
				}
			}
			now = stress_now();
		} while (progress && now < next_print && !stress_stopping);

		// The first line comes as soon as the start's work is done, then
		// one a second.
		caught_up = (memory >= stress_memory_target(s.memory, now - start, s.ramp_ns) || memory_retry > now) &&
			(threads >= stress_ramp_target(s.threads, now - start, s.ramp_ns) || thread_retry > now) &&
			(procs >= stress_ramp_target(s.procs, now - start, s.ramp_ns) || proc_retry > now);
		if (now >= next_print || (!printed && caught_up)) {
			stress_print(procs, threads, failed, memory);
			next_print = printed && now < next_print + STRESS_SECOND ? next_print + STRESS_SECOND : now + STRESS_SECOND;
			if (next_print <= now) next_print = now + STRESS_SECOND;
			printed = 1;
		}

		wake = next_print;
		if (hold_end < wake) wake = hold_end;
		// Memory held is whole steps until the last: the next step is due
		// at its ramp time (at once without a ramp), not before a retry.
		i = stress_due(memory / STRESS_MEMORY_STEP, stress_memory_steps(s.memory), start, s.ramp_ns, memory_retry);
		if (memory < s.memory && i < wake) wake = i;
		i = stress_due(threads, s.threads, start, s.ramp_ns, thread_retry);
		if (i < wake) wake = i;
		i = stress_due(procs, s.procs, start, s.ramp_ns, proc_retry);
		if (i < wake) wake = i;
		now = stress_now();
		wake = wake > now ? wake - now : 0;
		timeout.tv_sec = wake / STRESS_SECOND;
		timeout.tv_nsec = wake % STRESS_SECOND;
		pfd.fd = stress_stop_r;
		pfd.events = POLLIN;
		if (ppoll(&pfd, 1, &timeout, NULL) > 0) {
			char buf[64];
			while (read(stress_stop_r, buf, sizeof buf) > 0) {
			}
		}
	}

	// A stop signal with a drain: say so, keep holding what is held for
	// the drain (as a server finishes its requests), say so again. The
	// lines show whether the signal came and whether the drain was let
	// run to its end before the process was killed.
	if (stress_stopping && s.drain_ns > 0) {
		char buf[96];
		const char *name = stress_stop_signal == SIGINT ? "SIGINT" : "SIGTERM";
		int n = snprintf(buf, sizeof buf, "stop=%s drain_ms=%lld\n", name, (long long)(s.drain_ns / 1000000));
		stress_write(buf, n);
		stress_sleep_until(stress_now() + s.drain_ns);
		n = snprintf(buf, sizeof buf, "drained=%s\n", name);
		stress_write(buf, n);
	}

	// Release: the children go first and are reaped, so that none is left
	// behind when the process is gone; the threads and the memory go with
	// the process.
	for (i = 0; i < procs; i++) kill(pids[i], SIGKILL);
	for (i = 0; i < procs; i++) {
		while (waitpid(pids[i], NULL, 0) < 0 && errno == EINTR) {
		}
	}
	free(pids);
	pthread_attr_destroy(&attr);
	return 0;
}

// stress_warm is one of n calls that sit in C at the same time: each
// waits until all n are in (or deadline passes) and returns whether they
// all were.
static int stress_warm_inside, stress_warm_all;

static int stress_warm(int n, int64_t deadline) {
	if (__atomic_add_fetch(&stress_warm_inside, 1, __ATOMIC_SEQ_CST) >= n) {
		__atomic_store_n(&stress_warm_all, 1, __ATOMIC_SEQ_CST);
	}
	while (!__atomic_load_n(&stress_warm_all, __ATOMIC_SEQ_CST) && stress_now() < deadline) {
		stress_sleep_until(stress_now() + STRESS_SECOND / 1000);
	}
	__atomic_sub_fetch(&stress_warm_inside, 1, __ATOMIC_SEQ_CST);
	return __atomic_load_n(&stress_warm_all, __ATOMIC_SEQ_CST);
}
*/
import "C"

import (
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// spareThreads is how many idle Ms warmThreads leaves the runtime. One is
// what a long cgo call costs (the M that takes the P over); the second is
// margin.
const spareThreads = 2

// installStop routes SIGTERM and SIGINT to stress_run.
func installStop() error {
	if rc := C.stress_install_stop(); rc != 0 {
		return fmt.Errorf("installing the signal handlers: %w", syscall.Errno(rc))
	}
	return nil
}

// warmThreads makes the runtime hold spareThreads idle Ms while the PID
// budget is still there. spareThreads+1 goroutines sit in a cgo call at the
// same time, so each is on an M of its own (with one P, sysmon hands the P
// to another M whenever the one holding it blocks and goroutines wait).
// When they return, all but the M that runs main park as idle Ms, which
// the runtime reuses before it ever calls clone again.
func warmThreads() error {
	n := spareThreads + 1
	deadline := C.stress_now() + C.int64_t(5*time.Second)
	var wg sync.WaitGroup
	var all atomic.Bool
	for range n {
		wg.Go(func() {
			if C.stress_warm(C.int(n), deadline) != 0 {
				all.Store(true)
			}
		})
	}
	wg.Wait()
	if !all.Load() {
		return fmt.Errorf("the Go runtime did not start %d threads within 5s", n)
	}
	return nil
}

// hold runs the holding loop until --hold expires or a stop signal (and
// then --drain).
func hold(o options) error {
	spec := C.stress_spec{
		procs:    C.int64_t(o.procs),
		threads:  C.int64_t(o.threads),
		memory:   C.int64_t(o.memory),
		ramp_ns:  C.int64_t(o.ramp),
		hold_ns:  C.int64_t(o.hold),
		drain_ns: C.int64_t(o.drain),
	}
	if rc := C.stress_run(spec); rc != 0 {
		return syscall.Errno(rc)
	}
	return nil
}
