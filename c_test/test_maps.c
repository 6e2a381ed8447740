/* What the kernel says of an address (tb_maps.c): a shared mapping of a
 * file is named by the file's identity and the address's offset in it,
 * whatever mapped it; private and anonymous memory, and no mapping, are
 * not; many mappings before the one asked for are read through. Whether a
 * private mapping's pages are still the file's. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "tb_maps.h"

int main(void)
{
    long page = sysconf(_SC_PAGESIZE);
    char path[] = "/tmp/tb_maps_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    unlink(path);
    CHECK_EQ(ftruncate(fd, 4 * page), 0);
    struct stat st;
    CHECK_EQ(fstat(fd, &st), 0);

    /* Shared: named, at its offset, from the first page and from inside. */
    char *shared = mmap(NULL, 3 * page, PROT_READ | PROT_WRITE, MAP_SHARED, fd, page);
    CHECK(shared != MAP_FAILED);
    tb_maps_file f = {0};
    CHECK_EQ(tb_maps_shared_file_at((uintptr_t)shared, &f), 1);
    CHECK_EQU(f.dev, st.st_dev);
    CHECK_EQU(f.ino, st.st_ino);
    CHECK_EQU(f.offset, (uint64_t)page);
    CHECK_EQ(tb_maps_shared_file_at((uintptr_t)shared + 2 * page + 17, &f), 1);
    CHECK_EQU(f.offset, (uint64_t)(3 * page + 17));
    /* A page present in memory is a file's page all the same. */
    shared[0] = 1;
    CHECK_EQ(tb_maps_shared_file_at((uintptr_t)shared, &f), 1);
    CHECK_EQU(f.ino, st.st_ino);

    /* The same file mapped privately, the heap, and an
     * address where nothing is mapped: no shared file. */
    char *private = mmap(NULL, page, PROT_READ, MAP_PRIVATE, fd, 0);
    CHECK(private != MAP_FAILED);
    CHECK_EQ(tb_maps_shared_file_at((uintptr_t) private, &f), 0);
    char *heap = malloc(64);
    CHECK_EQ(tb_maps_shared_file_at((uintptr_t)heap, &f), 0);
    heap[0] = 1; /* present: answered from the page map */
    CHECK_EQ(tb_maps_shared_file_at((uintptr_t)heap, &f), 0);
    munmap(private, page);
    CHECK_EQ(tb_maps_shared_file_at((uintptr_t) private, &f), 0);
    CHECK_EQ(tb_maps_shared_file_at(0, &f), 0);

    /* Behind many mappings (each its own line, alternating protections so
     * the kernel cannot merge them): still found. */
    enum { MANY = 400 };
    char *many = mmap(NULL, MANY * page, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(many != MAP_FAILED);
    for (int i = 0; i < MANY; i += 2)
        mprotect(many + i * page, page, PROT_NONE);
    char *late = mmap(NULL, page, PROT_READ, MAP_SHARED, fd, 0);
    CHECK(late != MAP_FAILED);
    CHECK_EQ(tb_maps_shared_file_at((uintptr_t)late, &f), 1);
    CHECK_EQU(f.ino, st.st_ino);
    CHECK_EQ(tb_maps_shared_file_at((uintptr_t)many + page, &f), 0);

    /* A private mapping of the file: its pages are the file's, read or
     * not, until one is written (a private copy); a page written before
     * the range asked for does not count. Anonymous memory is not. */
    char *copy = mmap(NULL, 3 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    CHECK(copy != MAP_FAILED);
    CHECK_EQ(tb_maps_file_pages_only((uintptr_t)copy, (uintptr_t)copy + 3 * page), 1);
    volatile char sink = copy[page];
    (void)sink;
    CHECK_EQ(tb_maps_file_pages_only((uintptr_t)copy, (uintptr_t)copy + 3 * page), 1);
    copy[page + 5] = 7;
    CHECK_EQ(tb_maps_file_pages_only((uintptr_t)copy, (uintptr_t)copy + 3 * page), 0);
    CHECK_EQ(tb_maps_file_pages_only((uintptr_t)copy + page + 100, (uintptr_t)copy + page + 101), 0);
    CHECK_EQ(tb_maps_file_pages_only((uintptr_t)copy + 2 * page, (uintptr_t)copy + 3 * page), 1);
    CHECK_EQ(tb_maps_file_pages_only((uintptr_t)copy, (uintptr_t)copy + page), 1);
    CHECK_EQ(tb_maps_file_pages_only((uintptr_t)heap, (uintptr_t)heap + 64), 0);
    CHECK_EQ(tb_maps_file_pages_only((uintptr_t)copy, (uintptr_t)copy), 0);
    munmap(copy, 3 * page);

    munmap(late, page);
    munmap(many, MANY * page);
    munmap(shared, 3 * page);
    free(heap);
    close(fd);
    printf("test_maps: %d checks, %d failures\n", checks, failures);
    return failures != 0;
}
