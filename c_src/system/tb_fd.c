/* Whole reads and writes over a file descriptor: the loops that retry
 * EINTR and short transfers, once for every unit that reads or writes a
 * file. */
#define _GNU_SOURCE
#include "tb_fd.h"

#include <errno.h>
#include <stdint.h>
#include <unistd.h>

/* Moves len bytes between buf and fd: pread at `at` when reading, write(2)
 * at the file's position when writing. 1 when all moved; else 0, errno as
 * the failing call left it. */
static int move_all(int fd, char *p, size_t len, off_t at, int writing)
{
    while (len) {
        ssize_t n = writing ? write(fd, p, len) : pread(fd, p, len, at);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return 0;
        p += n;
        len -= (size_t)n;
        at += n;
    }
    return 1;
}

int tb_fd_read_all(int fd, void *buf, size_t len, off_t at)
{
    return move_all(fd, buf, len, at, 0);
}

int tb_fd_write_all(int fd, const void *buf, size_t len)
{
    /* write(2) only reads the buffer. */
    return move_all(fd, (char *)(uintptr_t)buf, len, 0, 1);
}
