/* An I/O error on a broker's disk, for the fault tests: preloaded into a broker
 * (LD_PRELOAD), it makes fsync and fdatasync fail with EIO while the file named by
 * FSYNC_FAULT_FILE exists, and passes them through otherwise. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

static int failing(void) {
    const char *path = getenv("FSYNC_FAULT_FILE");
    return path != NULL && access(path, F_OK) == 0;
}

int fsync(int fd) {
    static int (*real)(int);
    if (failing()) {
        errno = EIO;
        return -1;
    }
    if (real == NULL) real = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
    return real(fd);
}

int fdatasync(int fd) {
    static int (*real)(int);
    if (failing()) {
        errno = EIO;
        return -1;
    }
    if (real == NULL) real = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
    return real(fd);
}
