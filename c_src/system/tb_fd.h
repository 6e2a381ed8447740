/* Whole reads and writes over a file descriptor (tb_fd.c). */
#ifndef TB_FD_H
#define TB_FD_H

#include <stddef.h>
#include <sys/types.h>

/* len bytes read at offset `at`: 1, or 0 (a short file, or errno set). */
int tb_fd_read_all(int fd, void *buf, size_t len, off_t at);

/* len bytes written at the file's position: 1, or 0 with errno set. */
int tb_fd_write_all(int fd, const void *buf, size_t len);

#endif
