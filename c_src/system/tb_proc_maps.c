#define _GNU_SOURCE /* O_CLOEXEC */
#include "tb_proc_maps.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sysmacros.h>
#include <unistd.h>

/* One line: "lo-hi perms offset major:minor inode [path]", numbers in hex
 * but the inode. 1 when it parsed; *shared when perms say 's'. */
static int parse_line(const char *p, uint64_t *lo, uint64_t *hi, int *shared, uint64_t *offset, uint64_t *dev,
                      uint64_t *ino)
{
    char *end;
    *lo = strtoull(p, &end, 16);
    if (*end != '-')
        return 0;
    *hi = strtoull(end + 1, &end, 16);
    if (*end != ' ' || strlen(end) < 6)
        return 0;
    *shared = end[4] == 's';
    *offset = strtoull(end + 6, &end, 16);
    unsigned long major = strtoul(end, &end, 16);
    if (*end != ':')
        return 0;
    unsigned long minor = strtoul(end + 1, &end, 16);
    *dev = (uint64_t)makedev(major, minor);
    *ino = strtoull(end, &end, 10);
    return 1;
}

/* The kernel's page map of this process (/proc/self/pagemap, 8 bytes a
 * page: bit 63 present, 62 swapped, 61 a file page or shared anonymous
 * memory), opened once (an open of /proc costs tens of µs; pread on one
 * descriptor from many threads is safe) and kept: -1 when refused. */
static int pagemap_fd(void)
{
    static int pagemap = -2;
    int fd = __atomic_load_n(&pagemap, __ATOMIC_ACQUIRE);
    if (fd == -2) {
        int opened = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
        int expected = -2;
        if (!__atomic_compare_exchange_n(&pagemap, &expected, opened, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
            if (opened >= 0)
                close(opened);
        }
        fd = __atomic_load_n(&pagemap, __ATOMIC_ACQUIRE);
    }
    return fd;
}

/* 1 when the page holding addr is present and anonymous: not a file page
 * or shared anonymous memory. Such memory has no file behind it, and one
 * read of 8 bytes says so where the list of mappings would be read up to
 * addr's line. 0 when not known. */
static int anonymous_page(uintptr_t addr)
{
    int fd = pagemap_fd();
    long page = sysconf(_SC_PAGESIZE);
    if (fd < 0 || page <= 0)
        return 0;
    uint64_t entry = 0;
    ssize_t n = pread(fd, &entry, sizeof entry, (off_t)(addr / (uintptr_t)page * sizeof entry));
    return n == (ssize_t)sizeof entry && (entry >> 63 & 1) && !(entry >> 61 & 1);
}

int tb_proc_maps_file_pages_only(uintptr_t lo, uintptr_t hi)
{
    int fd = pagemap_fd();
    long page = sysconf(_SC_PAGESIZE);
    if (fd < 0 || page <= 0 || hi <= lo)
        return 0;
    uint64_t entries[512];
    uintptr_t first = lo / (uintptr_t)page, last = (hi - 1) / (uintptr_t)page;
    for (uintptr_t p = first; p <= last;) {
        size_t n = last - p + 1 < 512 ? (size_t)(last - p + 1) : 512;
        ssize_t got = pread(fd, entries, n * sizeof *entries, (off_t)(p * sizeof *entries));
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0 || got % (ssize_t)sizeof *entries)
            return 0;
        n = (size_t)got / sizeof *entries;
        for (size_t i = 0; i < n; i++) {
            uint64_t e = entries[i];
            /* Swapped out: only anonymous pages go to swap. */
            if ((e >> 62 & 1) || ((e >> 63 & 1) && !(e >> 61 & 1)))
                return 0;
        }
        p += n;
    }
    return 1;
}

int tb_proc_maps_shared_file_at(uintptr_t addr, tb_proc_maps_file *out)
{
    if (anonymous_page(addr))
        return 0;
    int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    /* Lines in address order: read until the one holding addr, or past it. */
    char buf[8192];
    size_t have = 0;
    int found = 0, done = 0;
    while (!done) {
        ssize_t n = read(fd, buf + have, sizeof buf - 1 - have);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        have += (size_t)n;
        buf[have] = '\0';
        char *line = buf, *nl;
        while ((nl = strchr(line, '\n')) != NULL) {
            *nl = '\0';
            uint64_t lo, hi, offset, dev, ino;
            int shared;
            if (parse_line(line, &lo, &hi, &shared, &offset, &dev, &ino) && addr < hi) {
                if (addr >= lo && shared && ino != 0) {
                    *out = (tb_proc_maps_file){.dev = dev, .ino = ino, .offset = offset + (addr - lo)};
                    found = 1;
                }
                done = 1;
                break;
            }
            line = nl + 1;
        }
        /* Keep the unfinished line. A line fills less than the buffer (a
         * path is at most PATH_MAX bytes): one that does not means a list
         * this reader does not understand, and no answer. */
        size_t rest = have - (size_t)(line - buf);
        if (rest == sizeof buf - 1)
            break;
        memmove(buf, line, rest);
        have = rest;
    }
    close(fd);
    return found;
}
