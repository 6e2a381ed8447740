/* tensor_blob_reaper LOCK: releases what a VM held in shared memory once
 * the VM is gone, however it went (halt, kill -9), without waiting for
 * another VM to load tensor_blob. The library starts it with its first
 * region. It leaves at once (so the VM has no child to reap later) and its
 * child waits to take the VM's lock (tb_shm_names.h), which the kernel
 * frees when the VM dies; then it drops the references the VM's journal
 * lists in PyTorch-format headers (unlinking each name whose count that
 * takes to zero: other holders keep theirs), and unlinks the VM's plain
 * names. Mappings other processes hold stay valid: unlinking removes only
 * the name. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <unistd.h>

#include "tb_fault.h"
#include "tb_shm_names.h"

int main(int argc, char **argv)
{
    if (argc != 2)
        return 2;
    const char *lock = argv[1];
    size_t prefix = strlen(TB_NAME_PREFIX);
    size_t token = strncmp(lock, TB_NAME_PREFIX, prefix) == 0 ? tb_shm_token_length(lock + prefix) : 0;
    if (token == 0 || strcmp(lock + prefix + token, TB_LOCK_SUFFIX) != 0)
        return 2;
    /* Nothing of the VM's is kept open, its lock above all: a descriptor
     * of the VM's open lock would hold the lock after the VM died. */
    struct rlimit files;
    int max_fd = getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < 65536 ? (int)files.rlim_cur : 65536;
    for (int fd = 3; fd < max_fd; fd++)
        close(fd);
    pid_t child = fork();
    if (child != 0)
        return child < 0;
    signal(SIGINT, SIG_IGN);
    signal(SIGHUP, SIG_IGN);
    signal(SIGQUIT, SIG_IGN);
    signal(SIGPIPE, SIG_IGN);
    if (chdir("/") != 0)
        return 1;
    int dir_fd = open(TB_SHM_DIR, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir_fd < 0)
        return 1;
    /* Never blocks on a FIFO planted under the lock's name. */
    int fd = tb_shm_open_at(dir_fd, lock, O_RDONLY);
    if (fd < 0)
        return errno == ENOENT ? 0 : 1; /* already reclaimed */
    while (flock(fd, LOCK_EX) != 0)
        if (errno != EINTR)
            return 1;
    /* A header shrunk by another program ends that drop, not the reaper. */
    tb_fault_install();
    tb_shm_release_token(dir_fd, lock + prefix, token);
    return 0;
}
