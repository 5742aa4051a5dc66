/* Preloaded before libfaketime for a host whose wall clock is off: clock_nanosleep on CLOCK_MONOTONIC goes
 * straight to the kernel. libfaketime 0.9.10 (Debian's) shifts an absolute monotonic deadline by the fake
 * offset even when monotonic time is not faked, so the kernel gets a deadline in the past or far ahead
 * (EINVAL, or a sleep of ten minutes): wolfcw/libfaketime#426. Python >= 3.11's time.sleep sleeps so. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

int clock_nanosleep(clockid_t clock, int flags, const struct timespec *request, struct timespec *remain) {
    static int (*next)(clockid_t, int, const struct timespec *, struct timespec *);
    if (clock == CLOCK_MONOTONIC)
        return syscall(SYS_clock_nanosleep, clock, flags, request, remain) == 0 ? 0 : errno;
    if (next == NULL)
        next = (int (*)(clockid_t, int, const struct timespec *, struct timespec *))dlsym(RTLD_NEXT, "clock_nanosleep");
    return next(clock, flags, request, remain);
}
