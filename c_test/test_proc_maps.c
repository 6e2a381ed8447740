/* What the kernel says of an address (tb_proc_maps.c): a shared mapping of a
 * file is named by the file's identity and the address's offset in it,
 * whatever mapped it; private and anonymous memory, and no mapping, are
 * not; many mappings before the one asked for are read through. Whether a
 * private mapping's pages are still the file's. Threads asking at once,
 * before anyone has asked, share one page-map descriptor (make tsan-test
 * runs this under ThreadSanitizer). */
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "tb_proc_maps.h"

/* The descriptors this process holds. */
static int open_descriptors(void)
{
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return -1;
    int n = 0;
    while (readdir(d))
        n++;
    closedir(d);
    return n;
}

enum { THREADS = 8, ROUNDS = 200 };

typedef struct {
    pthread_barrier_t *start;
    char *shared; /* a shared mapping of the file */
    struct stat *st;
    int wrong; /* answers that were not the kernel's */
} racer;

/* Each thread asks of a present heap page (the page map's answer) and of
 * the shared mapping (the list's), all starting at once, the first call of
 * the process among them. */
static void *race(void *arg)
{
    racer *r = arg;
    char *heap = malloc(64);
    heap[0] = 1;
    pthread_barrier_wait(r->start);
    for (int i = 0; i < ROUNDS; i++) {
        tb_proc_maps_file f = {0};
        if (tb_proc_maps_shared_file_at((uintptr_t)heap, &f) != 0)
            r->wrong++;
        if (tb_proc_maps_shared_file_at((uintptr_t)r->shared + 5, &f) != 1 || f.ino != (uint64_t)r->st->st_ino ||
            f.offset != 5)
            r->wrong++;
    }
    free(heap);
    return NULL;
}

int main(void)
{
    long page = sysconf(_SC_PAGESIZE);
    char path[] = "/tmp/tb_proc_maps_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    unlink(path);
    CHECK_EQ(ftruncate(fd, 4 * page), 0);
    struct stat st;
    CHECK_EQ(fstat(fd, &st), 0);

    /* Threads first, before any call: they race to open the page map, and
     * the process keeps exactly one descriptor for it. */
    {
        char *first = mmap(NULL, page, PROT_READ, MAP_SHARED, fd, 0);
        CHECK(first != MAP_FAILED);
        int before = open_descriptors();
        pthread_barrier_t start;
        pthread_barrier_init(&start, NULL, THREADS);
        pthread_t threads[THREADS];
        racer racers[THREADS];
        for (int i = 0; i < THREADS; i++) {
            racers[i] = (racer){.start = &start, .shared = first, .st = &st};
            CHECK_EQ(pthread_create(&threads[i], NULL, race, &racers[i]), 0);
        }
        int wrong = 0;
        for (int i = 0; i < THREADS; i++) {
            pthread_join(threads[i], NULL);
            wrong += racers[i].wrong;
        }
        pthread_barrier_destroy(&start);
        CHECK_EQ(wrong, 0);
        CHECK_EQ(open_descriptors(), before + 1);
        munmap(first, page);
    }

    /* Shared: named, at its offset, from the first page and from inside. */
    char *shared = mmap(NULL, 3 * page, PROT_READ | PROT_WRITE, MAP_SHARED, fd, page);
    CHECK(shared != MAP_FAILED);
    tb_proc_maps_file f = {0};
    CHECK_EQ(tb_proc_maps_shared_file_at((uintptr_t)shared, &f), 1);
    CHECK_EQU(f.dev, st.st_dev);
    CHECK_EQU(f.ino, st.st_ino);
    CHECK_EQU(f.offset, (uint64_t)page);
    CHECK_EQ(tb_proc_maps_shared_file_at((uintptr_t)shared + 2 * page + 17, &f), 1);
    CHECK_EQU(f.offset, (uint64_t)(3 * page + 17));
    /* A page present in memory is a file's page all the same. */
    shared[0] = 1;
    CHECK_EQ(tb_proc_maps_shared_file_at((uintptr_t)shared, &f), 1);
    CHECK_EQU(f.ino, st.st_ino);

    /* The same file mapped privately, the heap, and an
     * address where nothing is mapped: no shared file. */
    char *private = mmap(NULL, page, PROT_READ, MAP_PRIVATE, fd, 0);
    CHECK(private != MAP_FAILED);
    CHECK_EQ(tb_proc_maps_shared_file_at((uintptr_t) private, &f), 0);
    char *heap = malloc(64);
    CHECK_EQ(tb_proc_maps_shared_file_at((uintptr_t)heap, &f), 0);
    heap[0] = 1; /* present: answered from the page map */
    CHECK_EQ(tb_proc_maps_shared_file_at((uintptr_t)heap, &f), 0);
    munmap(private, page);
    CHECK_EQ(tb_proc_maps_shared_file_at((uintptr_t) private, &f), 0);
    CHECK_EQ(tb_proc_maps_shared_file_at(0, &f), 0);

    /* Behind many mappings (each its own line, alternating protections so
     * the kernel cannot merge them): still found. */
    enum { MANY = 400 };
    char *many = mmap(NULL, MANY * page, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(many != MAP_FAILED);
    for (int i = 0; i < MANY; i += 2)
        mprotect(many + i * page, page, PROT_NONE);
    char *late = mmap(NULL, page, PROT_READ, MAP_SHARED, fd, 0);
    CHECK(late != MAP_FAILED);
    CHECK_EQ(tb_proc_maps_shared_file_at((uintptr_t)late, &f), 1);
    CHECK_EQU(f.ino, st.st_ino);
    CHECK_EQ(tb_proc_maps_shared_file_at((uintptr_t)many + page, &f), 0);

    /* A private mapping of the file: its pages are the file's, read or
     * not, until one is written (a private copy); a page written before
     * the range asked for does not count. Anonymous memory is not. */
    char *copy = mmap(NULL, 3 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    CHECK(copy != MAP_FAILED);
    CHECK_EQ(tb_proc_maps_file_pages_only((uintptr_t)copy, (uintptr_t)copy + 3 * page), 1);
    volatile char sink = copy[page];
    (void)sink;
    CHECK_EQ(tb_proc_maps_file_pages_only((uintptr_t)copy, (uintptr_t)copy + 3 * page), 1);
    copy[page + 5] = 7;
    CHECK_EQ(tb_proc_maps_file_pages_only((uintptr_t)copy, (uintptr_t)copy + 3 * page), 0);
    CHECK_EQ(tb_proc_maps_file_pages_only((uintptr_t)copy + page + 100, (uintptr_t)copy + page + 101), 0);
    CHECK_EQ(tb_proc_maps_file_pages_only((uintptr_t)copy + 2 * page, (uintptr_t)copy + 3 * page), 1);
    CHECK_EQ(tb_proc_maps_file_pages_only((uintptr_t)copy, (uintptr_t)copy + page), 1);
    CHECK_EQ(tb_proc_maps_file_pages_only((uintptr_t)heap, (uintptr_t)heap + 64), 0);
    CHECK_EQ(tb_proc_maps_file_pages_only((uintptr_t)copy, (uintptr_t)copy), 0);
    munmap(copy, 3 * page);

    munmap(late, page);
    munmap(many, MANY * page);
    munmap(shared, 3 * page);
    free(heap);
    close(fd);
    printf("test_proc_maps: %d checks, %d failures\n", checks, failures);
    return failures != 0;
}
