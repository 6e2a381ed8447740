/* Region files: their names, opening them by name, PyTorch's header count,
 * and what a VM that is gone left in them; shared by the library and its
 * reaper (tensor_blob_reaper.c), so no BEAM here.
 *
 * /dev/shm belongs to every program and user of the host: any of them can
 * plant a FIFO, a link or another user's file under a name we open. Every
 * file opened by name here cannot block (O_NONBLOCK) or follow a link
 * (O_NOFOLLOW), and is used only when it is a regular file of this user.
 *
 * A VM's names are "tensor_blob.<token>.<n>" (plain regions) and
 * "torch_tensor_blob.<token>.<n>" (PyTorch's format), where the token is
 * "<pid>-<64 random bits in hex>", new for each build loaded: the pid only
 * helps a reader, since pids belong to a PID namespace and /dev/shm may be
 * shared across namespaces. What says a creator lives is a lock: it holds
 * flock(LOCK_EX) on "tensor_blob.<token>.lock" for its whole life (the
 * kernel drops it when the process dies, however it dies). Whoever takes
 * that lock may release what the token held: the references listed in its
 * journal, "tensor_blob.<token>.held" (dropped, and each name whose count
 * that takes to zero unlinked), then its other names (of both forms, as
 * tb_shm_release_token says) and the lock.
 *
 * Every touch of a header or of the journal runs under the SIGBUS guard
 * (tb_fault.h): another program may shrink either file. */
#ifndef TB_SHM_NAMES_H
#define TB_SHM_NAMES_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#define TB_SHM_DIR "/dev/shm"
#define TB_NAME_PREFIX "tensor_blob."
#define TB_TORCH_NAME_PREFIX "torch_tensor_blob."
/* The forms a VM names its regions in, "<prefix><token>.<n>": one list,
 * which the reclaim reads both to find the tokens that left names and to
 * release them. header: the count header its regions start with (0: none;
 * a counted name goes with its last holder, not its creator). */
typedef struct {
    const char *prefix;
    size_t header;
} tb_shm_name_form;
enum { TB_SHM_NAME_FORMS = 2 };
extern const tb_shm_name_form tb_shm_name_forms[TB_SHM_NAME_FORMS];
/* Every PyTorch-format name starts so: PyTorch's "/torch_<pid>_<n>_<k>", ours. */
#define TB_TORCH_FORMAT_PREFIX "torch_"
#define TB_LOCK_SUFFIX ".lock"
#define TB_JOURNAL_SUFFIX ".held"
/* What shm_open accepts on Linux (glibc): an optional leading slash, then
 * 1 to NAME_MAX - 2 bytes with no slash and no NUL, other than "." and "..". */
#define TB_SHM_NAME_MAX (NAME_MAX - 2)
/* PyTorch's header: a std::atomic<int> count, padded to map_alloc_alignment. */
#define TB_TORCH_HEADER 64

/* Refusals of tb_shm_open beside errno values. */
enum { TB_SHM_NOT_REGULAR = -1, TB_SHM_NOT_OURS = -2 };

/* The one name check: p[0..n) as shm_open takes it; out gets "/" and the
 * name (room for NAME_MAX + 2 bytes). 0 when it is no such name. */
int tb_shm_name(const char *p, size_t n, char *out, size_t size);
/* 1 when a checked name ("/x") is in PyTorch's format by its name. */
int tb_shm_torch_format(const char *name);

/* Opens a region by its checked name ("/x"), read and write: with create,
 * a new file (mode 0600, never an existing name). Never blocks, never
 * follows a link; st gets the file's status. The descriptor, or -1 with
 * *error an errno or a TB_SHM_ refusal (then nothing stays open). */
int tb_shm_open(const char *name, int create, struct stat *st, int *error);
/* What a tb_shm_open error says, for a message. */
const char *tb_shm_strerror(int error);
/* Opens dir_fd/name read-only the same way (locks, journals): -1 when it
 * is absent (errno ENOENT) or no regular file of ours. */
int tb_shm_open_at(int dir_fd, const char *name, int flags);

/* PyTorch's header count, under the guard. take: 1 with one more
 * reference; 0 when the count is none (zero: the last holder is unlinking
 * the name; below zero, or at INT_MAX: no count PyTorch writes), with
 * *seen what was there; -1 when the memory vanished (*seen is then not
 * set). drop: 1 when this was the last (the
 * caller unlinks the name), 0 when others hold it, -1 when the memory
 * vanished. init: 1 with the count set to 1, 0 when the memory vanished. */
int tb_shm_header_take(void *header, int *seen);
int tb_shm_header_drop(void *header);
int tb_shm_header_init(void *header);

/* The journal: slots of one state word and a name. A slot is HELD while
 * its VM holds one reference in the header of name, MADE while the VM is
 * making name (nobody else knows it yet). */
enum { TB_SLOT_FREE = 0, TB_SLOT_HELD = 1, TB_SLOT_MADE = 2 };
typedef struct {
    uint32_t state; /* read and written atomically */
    uint32_t unused;
    char name[NAME_MAX + 1]; /* "/x" */
} tb_shm_slot;

/* The length of the token s starts with ("<digits>-<16 hex>", then '.'),
 * or 0 when s is not a name of this form. */
size_t tb_shm_token_length(const char *s);

/* Releases what a token held (its creator is gone: the caller holds its
 * lock): the references its journal lists, then every plain name of the
 * token and the journal, the lock last. A journal is trusted only for what
 * its token could have recorded: a name being made only when it is the
 * token's own ("/torch_tensor_blob.<token>.<n>"), a reference held only in
 * a PyTorch-format name ("/torch_..."); any other slot is skipped. Then
 * the token's names of every form (tb_shm_name_forms): each uncounted one
 * is removed; a counted one that the journal left only when no holder can
 * count it down (shorter than its header, or the header vanished): any
 * count, zero too, may be another program's, and PyTorch aborts when the
 * name its last holder unlinks is gone. Returns how many names other than
 * the lock and journal were removed. */
int tb_shm_release_token(int dir_fd, const char *token, size_t length);

/* Releases the tokens whose creators are gone (their lock is free, or was
 * removed with their last names by an earlier reclaim that stopped part
 * way), skipping skip_token; returns how many names were removed. A token
 * is found by a name of any form (tb_shm_name_forms), its lock or journal.
 * Names of another form are left: a pid cannot say whether their creator
 * lives. */
int tb_shm_reclaim(const char *skip_token);

#endif
