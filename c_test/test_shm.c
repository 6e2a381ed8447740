/* Region files (tb_shm_names.h): the one name check, opening by name
 * (never blocking on a FIFO, never following a link, only regular files
 * of this user), PyTorch's header count under the SIGBUS guard, and what a
 * dead VM left: its journal's references dropped (a name unlinked only by
 * its last holder), its plain names and lock removed. The cases that plant
 * files run in a private /dev/shm (a mount namespace of this process), and
 * are skipped with a message where the machine does not allow one. */
#define _GNU_SOURCE /* unshare, CLONE_NEWNS */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "tb_fault.h"
#include "tb_shm_names.h"

#define TOKEN "1-0123456789abcdef"

static void test_names(void)
{
    char out[NAME_MAX + 2];
    CHECK(tb_shm_name("x", 1, out, sizeof out) && strcmp(out, "/x") == 0);
    CHECK(tb_shm_name("/x", 2, out, sizeof out) && strcmp(out, "/x") == 0);
    CHECK(!tb_shm_name("", 0, out, sizeof out));
    CHECK(!tb_shm_name("/", 1, out, sizeof out));
    CHECK(!tb_shm_name(".", 1, out, sizeof out));
    CHECK(!tb_shm_name("/..", 3, out, sizeof out));
    CHECK(!tb_shm_name("a/b", 3, out, sizeof out));
    CHECK(!tb_shm_name("a\0b", 3, out, sizeof out));
    char longest[TB_SHM_NAME_MAX + 1];
    memset(longest, 'a', sizeof longest);
    CHECK(tb_shm_name(longest, TB_SHM_NAME_MAX, out, sizeof out));
    CHECK(!tb_shm_name(longest, TB_SHM_NAME_MAX + 1, out, sizeof out));
    CHECK(!tb_shm_name("x", 1, out, 2)); /* no room */
    CHECK(tb_shm_torch_format("/torch_1_2_3"));
    CHECK(tb_shm_torch_format("/torch_tensor_blob." TOKEN ".0"));
    CHECK(!tb_shm_torch_format("/tensor_blob." TOKEN ".0"));
    CHECK(!tb_shm_torch_format("/psm_12ab"));
    CHECK_EQ(tb_shm_token_length(TOKEN ".0"), strlen(TOKEN));
    CHECK_EQ(tb_shm_token_length(TOKEN), 0);
    CHECK_EQ(tb_shm_token_length("1-0123456789abcde.0"), 0);
}

/* A private /dev/shm: planted files are seen by this process alone. */
static int private_shm(void)
{
    if (unshare(CLONE_NEWNS) != 0) {
        printf("test_shm: skipped the planted files: no mount namespace here (%s)\n", strerror(errno));
        return 0;
    }
    if (mount("none", "/", "none", MS_REC | MS_PRIVATE, NULL) != 0 ||
        mount("tmpfs", TB_SHM_DIR, "tmpfs", 0, "size=4m") != 0) {
        printf("test_shm: skipped the planted files: cannot mount a tmpfs on " TB_SHM_DIR " (%s)\n", strerror(errno));
        return 0;
    }
    return 1;
}

static int exists(const char *name)
{
    char path[sizeof TB_SHM_DIR + NAME_MAX + 1];
    snprintf(path, sizeof path, TB_SHM_DIR "/%s", name);
    struct stat st;
    return lstat(path, &st) == 0;
}

/* A file of size bytes named name in /dev/shm whose first int is count. */
static void region(const char *name, int count, size_t size)
{
    char path[sizeof TB_SHM_DIR + NAME_MAX + 1];
    snprintf(path, sizeof path, TB_SHM_DIR "/%s", name);
    int fd = open(path, O_CREAT | O_RDWR | O_TRUNC, 0600);
    CHECK(fd >= 0);
    CHECK(ftruncate(fd, (off_t)size) == 0);
    CHECK(pwrite(fd, &count, sizeof count, 0) == sizeof count);
    close(fd);
}

static int count_of(const char *name)
{
    char path[sizeof TB_SHM_DIR + NAME_MAX + 1];
    snprintf(path, sizeof path, TB_SHM_DIR "/%s", name);
    int fd = open(path, O_RDONLY);
    int count = -999;
    if (fd >= 0 && pread(fd, &count, sizeof count, 0) != sizeof count)
        count = -998;
    if (fd >= 0)
        close(fd);
    return count;
}

static void plant_fifo(const char *name)
{
    char path[sizeof TB_SHM_DIR + NAME_MAX + 1];
    snprintf(path, sizeof path, TB_SHM_DIR "/%s", name);
    CHECK(mkfifo(path, 0600) == 0);
}

static void test_open(void)
{
    struct stat st;
    int error = 0;
    region("plain", 0, 16);
    int fd = tb_shm_open("/plain", 0, &st, &error);
    CHECK(fd >= 0 && st.st_size == 16);
    if (fd >= 0)
        close(fd);
    /* Create never takes an existing name. */
    CHECK_EQ(tb_shm_open("/plain", 1, &st, &error), -1);
    CHECK_EQ(error, EEXIST);
    CHECK_EQ(tb_shm_open("/absent", 0, &st, &error), -1);
    CHECK_EQ(error, ENOENT);

    /* A FIFO opens at once, and is refused (alarm: a blocking open fails the test). */
    plant_fifo("fifo");
    alarm(10);
    CHECK_EQ(tb_shm_open("/fifo", 0, &st, &error), -1);
    CHECK_EQ(error, TB_SHM_NOT_REGULAR);
    int dir_fd = open(TB_SHM_DIR, O_RDONLY | O_DIRECTORY);
    CHECK_EQ(tb_shm_open_at(dir_fd, "fifo", O_RDONLY), -1);
    alarm(0);
    CHECK(strstr(tb_shm_strerror(TB_SHM_NOT_REGULAR), "not a regular file") != NULL);

    /* A link is not followed, wherever it points. */
    CHECK(symlink(TB_SHM_DIR "/plain", TB_SHM_DIR "/link") == 0);
    CHECK_EQ(tb_shm_open("/link", 0, &st, &error), -1);
    CHECK_EQ(error, ELOOP);
    CHECK_EQ(tb_shm_open_at(dir_fd, "link", O_RDONLY), -1);

    /* A file of another user (only root can plant one). */
    region("foreign", 1, 128);
    if (chown(TB_SHM_DIR "/foreign", geteuid() + 1, (gid_t)-1) == 0) {
        CHECK_EQ(tb_shm_open("/foreign", 0, &st, &error), -1);
        CHECK_EQ(error, TB_SHM_NOT_OURS);
        CHECK_EQ(tb_shm_open_at(dir_fd, "foreign", O_RDONLY), -1);
    } else {
        printf("test_shm: skipped another user's file: chown refused (%s)\n", strerror(errno));
    }
    close(dir_fd);
}

static void test_header(void)
{
    region("counted", 1, TB_TORCH_HEADER + 8);
    int fd = open(TB_SHM_DIR "/counted", O_RDWR);
    void *base = mmap(NULL, TB_TORCH_HEADER + 8, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    CHECK(base != MAP_FAILED);
    int seen;
    CHECK(tb_shm_header_take(base, &seen) == 1 && seen == 1);
    CHECK_EQ(count_of("counted"), 2);
    CHECK_EQ(tb_shm_header_drop(base), 0);
    CHECK_EQ(tb_shm_header_drop(base), 1);
    /* Zero: being unlinked; neither taken nor dropped below zero. */
    CHECK(tb_shm_header_take(base, &seen) == 0 && seen == 0);
    CHECK_EQ(tb_shm_header_drop(base), 0);
    CHECK_EQ(count_of("counted"), 0);
    CHECK(tb_shm_header_init(base) && count_of("counted") == 1);
    /* Counts no PyTorch writes (a forged header): refused, seen as they
     * are (INT_MIN too: it is a count, not the memory vanishing). */
    const int forged[] = {-1, INT_MIN, INT_MAX};
    for (size_t i = 0; i < sizeof forged / sizeof forged[0]; i++) {
        CHECK(pwrite(fd, &forged[i], sizeof forged[i], 0) == sizeof forged[i]);
        seen = 12345;
        CHECK_EQ(tb_shm_header_take(base, &seen), 0);
        CHECK_EQ(seen, forged[i]);
        CHECK_EQ(count_of("counted"), forged[i]);
    }
    CHECK(tb_shm_header_init(base) && count_of("counted") == 1);
    /* Shrunk by another program: every touch ends in an error, not SIGBUS. */
    CHECK(ftruncate(fd, 0) == 0);
    CHECK_EQ(tb_shm_header_drop(base), -1);
    CHECK_EQ(tb_shm_header_take(base, &seen), -1);
    CHECK(!tb_shm_header_init(base));
    munmap(base, TB_TORCH_HEADER + 8);
    close(fd);
}

/* A journal as a VM leaves it: slots of state and name. */
static void journal(const char *token, const uint32_t *states, const char *const *names, int n)
{
    char name[NAME_MAX + 1];
    snprintf(name, sizeof name, TB_NAME_PREFIX "%s" TB_JOURNAL_SUFFIX, token);
    region(name, 0, (size_t)n * sizeof(tb_shm_slot));
    char path[sizeof TB_SHM_DIR + NAME_MAX + 1];
    snprintf(path, sizeof path, TB_SHM_DIR "/%s", name);
    int fd = open(path, O_RDWR);
    for (int i = 0; i < n; i++) {
        tb_shm_slot slot = {.state = states[i]};
        snprintf(slot.name, sizeof slot.name, "/%s", names[i]);
        CHECK(pwrite(fd, &slot, sizeof slot, (off_t)(i * sizeof slot)) == sizeof slot);
    }
    close(fd);
}

static void test_dead_vm(void)
{
    /* The dead VM held a reference in shared (another holder keeps it),
     * the only one in alone, was making made, and had a free slot naming
     * untouched; a plain name and its lock. */
    region("torch_tensor_blob." TOKEN ".0", 2, TB_TORCH_HEADER + 8);
    region("torch_tensor_blob." TOKEN ".1", 1, TB_TORCH_HEADER + 8);
    region("torch_tensor_blob." TOKEN ".2", 1, TB_TORCH_HEADER + 8);
    region("torch_9_9_9", 1, TB_TORCH_HEADER + 8);
    region("torch_short", 1, 8);                   /* too short for a header: left */
    region("torch_tensor_blob." TOKEN ".5", 1, 0); /* its own, shrunk: removed */
    region(TB_NAME_PREFIX TOKEN ".3", 0, 8);
    region(TB_NAME_PREFIX TOKEN TB_LOCK_SUFFIX, 0, 0);
    const uint32_t states[] = {TB_SLOT_HELD, TB_SLOT_HELD, TB_SLOT_MADE, TB_SLOT_FREE, TB_SLOT_HELD, TB_SLOT_HELD};
    const char *const names[] = {"torch_tensor_blob." TOKEN ".0",
                                 "torch_tensor_blob." TOKEN ".1",
                                 "torch_tensor_blob." TOKEN ".2",
                                 "torch_9_9_9",
                                 "torch_short",
                                 "torch_tensor_blob." TOKEN ".5"};
    journal(TOKEN, states, names, 6);

    /* Its lock is held (the VM lives): nothing is touched. */
    int lock = open(TB_SHM_DIR "/" TB_NAME_PREFIX TOKEN TB_LOCK_SUFFIX, O_RDONLY);
    CHECK(flock(lock, LOCK_EX) == 0);
    CHECK_EQ(tb_shm_reclaim(""), 0);
    CHECK_EQ(count_of("torch_tensor_blob." TOKEN ".0"), 2);
    CHECK(exists(TB_NAME_PREFIX TOKEN ".3"));
    close(lock); /* the VM dies */

    CHECK_EQ(tb_shm_reclaim(""), 1);
    CHECK_EQ(count_of("torch_tensor_blob." TOKEN ".0"), 1); /* the other holder's */
    CHECK(!exists("torch_tensor_blob." TOKEN ".1"));        /* its last holder was the dead VM */
    CHECK(!exists("torch_tensor_blob." TOKEN ".2"));        /* being made: nobody else knew it */
    CHECK_EQ(count_of("torch_9_9_9"), 1);                   /* a free slot holds nothing */
    CHECK(exists("torch_short"));
    CHECK(!exists("torch_tensor_blob." TOKEN ".5"));
    CHECK(!exists(TB_NAME_PREFIX TOKEN ".3"));
    CHECK(!exists(TB_NAME_PREFIX TOKEN TB_JOURNAL_SUFFIX));
    CHECK(!exists(TB_NAME_PREFIX TOKEN TB_LOCK_SUFFIX));

    /* A second release (another reclaimer that opened the lock before it
     * went) drops nothing twice. */
    region("torch_tensor_blob." TOKEN ".0", 2, TB_TORCH_HEADER + 8);
    journal(TOKEN, states, names, 1);
    int dir_fd = open(TB_SHM_DIR, O_RDONLY | O_DIRECTORY);
    tb_shm_release_token(dir_fd, TOKEN ".", strlen(TOKEN));
    tb_shm_release_token(dir_fd, TOKEN ".", strlen(TOKEN));
    CHECK_EQ(count_of("torch_tensor_blob." TOKEN ".0"), 1);
    close(dir_fd);

    /* A FIFO planted as a lock: reclaim neither blocks nor judges it. */
    region(TB_NAME_PREFIX TOKEN ".4", 0, 8);
    plant_fifo(TB_NAME_PREFIX TOKEN TB_LOCK_SUFFIX);
    alarm(10);
    CHECK_EQ(tb_shm_reclaim(""), 0);
    alarm(0);
    CHECK(exists(TB_NAME_PREFIX TOKEN ".4"));
}

/* A forged journal of a dead token (a program of this user wrote it) may
 * only name what that token could have recorded: names being made only its
 * own, references held only in PyTorch-format names. Another program's
 * PyTorch region, a live VM's plain and PyTorch regions are left as they
 * are, counts unchanged. */
static void test_forged_journal(void)
{
#define LIVE "2-fedcba9876543210"
#define DEAD "3-00112233445566ff"
    region(TB_NAME_PREFIX LIVE TB_LOCK_SUFFIX, 0, 0);
    int lock = open(TB_SHM_DIR "/" TB_NAME_PREFIX LIVE TB_LOCK_SUFFIX, O_RDONLY);
    CHECK(flock(lock, LOCK_EX) == 0);               /* the live VM */
    region("torch_77_1_0", 1, TB_TORCH_HEADER + 8); /* another program's */
    region(TB_NAME_PREFIX LIVE ".0", 5, 64);        /* the live VM's plain regions */
    region(TB_NAME_PREFIX LIVE ".1", 3, 64);
    region("torch_tensor_blob." LIVE ".2", 1, TB_TORCH_HEADER + 8); /* the live VM's own PyTorch region */
    region("torch_tensor_blob." DEAD ".0", 1, TB_TORCH_HEADER + 8); /* the dead token's own, being made */
    region(TB_NAME_PREFIX DEAD TB_LOCK_SUFFIX, 0, 0);
    const uint32_t states[] = {TB_SLOT_MADE, TB_SLOT_MADE, TB_SLOT_MADE, TB_SLOT_HELD, TB_SLOT_HELD, TB_SLOT_MADE};
    const char *const names[] = {
        "torch_77_1_0",           TB_NAME_PREFIX LIVE ".0",           "torch_tensor_blob." LIVE ".2",
        TB_NAME_PREFIX LIVE ".1", TB_NAME_PREFIX LIVE TB_LOCK_SUFFIX, "torch_tensor_blob." DEAD ".0"};
    journal(DEAD, states, names, 6);

    CHECK_EQ(tb_shm_reclaim(""), 0);
    CHECK_EQ(count_of("torch_77_1_0"), 1);
    CHECK_EQ(count_of(TB_NAME_PREFIX LIVE ".0"), 5);
    CHECK_EQ(count_of(TB_NAME_PREFIX LIVE ".1"), 3);
    CHECK_EQ(count_of("torch_tensor_blob." LIVE ".2"), 1);
    CHECK(exists(TB_NAME_PREFIX LIVE TB_LOCK_SUFFIX));
    CHECK(!exists("torch_tensor_blob." DEAD ".0")); /* its own: made, so removed */
    CHECK(!exists(TB_NAME_PREFIX DEAD TB_JOURNAL_SUFFIX));
    CHECK(!exists(TB_NAME_PREFIX DEAD TB_LOCK_SUFFIX));
    close(lock);
#undef LIVE
#undef DEAD
}

/* A dead token that left neither lock nor journal (a program of this user
 * deleted them while its VM lived): it is found by a name of any form the
 * library names regions in, and its names of every form go, but for a
 * counted one that still has a count (another program's holders unlink
 * it). A live VM's names of every form stay as they are. The forms come
 * from the library's list, tb_shm_name_forms; each test of the list runs
 * in a fresh tmpfs, so the earlier cases' leftovers count for nothing. */
static void test_every_form(void)
{
    if (mount("tmpfs", TB_SHM_DIR, "tmpfs", 0, "size=4m") != 0) {
        printf("test_shm: skipped every form: cannot mount a fresh tmpfs on " TB_SHM_DIR " (%s)\n", strerror(errno));
        return;
    }
#define LIVE "4-0123456789abcdee"
#define DEAD "5-aaaaaaaaaaaaaaaa"
    region(TB_NAME_PREFIX LIVE TB_LOCK_SUFFIX, 0, 0);
    int lock = open(TB_SHM_DIR "/" TB_NAME_PREFIX LIVE TB_LOCK_SUFFIX, O_RDONLY);
    CHECK(flock(lock, LOCK_EX) == 0);
    char name[NAME_MAX + 1];
    int gone = 0;
    for (int i = 0; i < TB_SHM_NAME_FORMS; i++) {
        const tb_shm_name_form *f = &tb_shm_name_forms[i];
        snprintf(name, sizeof name, "%s" LIVE ".1", f->prefix);
        region(name, 1, f->header + 8);
        /* Its own, shorter than any header: no holder counts it. */
        snprintf(name, sizeof name, "%s" DEAD ".1", f->prefix);
        region(name, 0, 0);
        gone++;
        /* Counted, 1: another program holds it. */
        snprintf(name, sizeof name, "%s" DEAD ".2", f->prefix);
        region(name, 1, f->header + 8);
        gone += !f->header;
        /* Counted, 0: its last holder is unlinking it. */
        snprintf(name, sizeof name, "%s" DEAD ".3", f->prefix);
        region(name, 0, f->header + 8);
        gone += !f->header;
        /* A dead token whose only name is of this form. */
        snprintf(name, sizeof name, "%s%d-%016x.0", f->prefix, 6 + i, (unsigned)i);
        region(name, 0, 0);
        gone++;
    }

    CHECK_EQ(tb_shm_reclaim(""), gone);
    for (int i = 0; i < TB_SHM_NAME_FORMS; i++) {
        const tb_shm_name_form *f = &tb_shm_name_forms[i];
        snprintf(name, sizeof name, "%s" LIVE ".1", f->prefix);
        CHECK_EQ(count_of(name), 1);
        snprintf(name, sizeof name, "%s" DEAD ".1", f->prefix);
        CHECK(!exists(name));
        snprintf(name, sizeof name, "%s" DEAD ".2", f->prefix);
        CHECK(f->header ? count_of(name) == 1 : !exists(name));
        snprintf(name, sizeof name, "%s" DEAD ".3", f->prefix);
        CHECK(f->header ? count_of(name) == 0 : !exists(name));
        snprintf(name, sizeof name, "%s%d-%016x.0", f->prefix, 6 + i, (unsigned)i);
        CHECK(!exists(name));
    }
    CHECK(exists(TB_NAME_PREFIX LIVE TB_LOCK_SUFFIX));
    /* Judged again at the next reclaim, the held one still stays. */
    CHECK_EQ(tb_shm_reclaim(""), 0);
    CHECK_EQ(count_of(TB_TORCH_NAME_PREFIX DEAD ".2"), 1);
    close(lock);
    umount2(TB_SHM_DIR, MNT_DETACH);
#undef LIVE
#undef DEAD
}

int main(void)
{
    CHECK(tb_fault_install());
    test_names();
    if (private_shm()) {
        test_open();
        test_header();
        test_dead_vm();
        test_forged_journal();
        test_every_form();
    }
    printf("test_shm: %d checks, %d failures\n", checks, failures);
    return failures != 0;
}
