#define _GNU_SOURCE /* fdopendir, unlinkat */
#include "tb_shm_names.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

size_t tb_shm_token_length(const char *s)
{
    size_t i = 0;
    while (s[i] >= '0' && s[i] <= '9')
        i++;
    if (i == 0 || s[i] != '-')
        return 0;
    size_t hex = ++i;
    while ((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))
        i++;
    return i - hex == 16 && s[i] == '.' ? i : 0;
}

int tb_shm_unlink_token(int dir_fd, const char *token, size_t length)
{
    char lock[NAME_MAX + 1];
    snprintf(lock, sizeof lock, TB_NAME_PREFIX "%.*s" TB_LOCK_SUFFIX, (int)length, token);
    int listing = openat(dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC); /* its own offset */
    DIR *dir = listing >= 0 ? fdopendir(listing) : NULL;
    if (!dir) {
        if (listing >= 0)
            close(listing);
        return 0;
    }
    size_t prefix = strlen(TB_NAME_PREFIX);
    int removed = 0;
    struct dirent *e;
    while ((e = readdir(dir))) {
        const char *name = e->d_name;
        if (strncmp(name, TB_NAME_PREFIX, prefix) != 0 || strncmp(name + prefix, token, length) != 0 ||
            name[prefix + length] != '.' || strcmp(name, lock) == 0)
            continue;
        removed += unlinkat(dir_fd, name, 0) == 0;
    }
    closedir(dir);
    unlinkat(dir_fd, lock, 0);
    return removed;
}
