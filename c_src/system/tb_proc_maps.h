/* What the kernel says of an address: the shared file mapped there.
 *
 * Memory that reached a tensor from another library (a backend's own
 * mapping of a shared-memory region, an import) is not in the library's
 * list of its own mappings; the kernel's list of this process's mappings
 * (/proc/self/maps) still names the file behind it, which another
 * program can shrink. No BEAM, no libtorch. */
#ifndef TB_PROC_MAPS_H
#define TB_PROC_MAPS_H

#include <stdint.h>

typedef struct {
    uint64_t dev, ino; /* the file's identity, as fstat gives it */
    uint64_t offset;   /* of the address in the file */
} tb_proc_maps_file;

/* 1 when addr lies in a shared mapping of a file (*out says which, and
 * where); 0 when in a private mapping (of a file or anonymous), in none, or when the
 * kernel's list cannot be read. A present anonymous page is answered from
 * the page map (8 bytes); anything else reads the list up to addr's line:
 * call it once per piece of memory and keep the answer. */
int tb_proc_maps_shared_file_at(uintptr_t addr, tb_proc_maps_file *out);

/* 1 when every page of [lo, hi) in a private mapping of a file is still
 * the file's own (in the page cache, or not read yet): none was copied on
 * a write (present and anonymous, or swapped out). 0 when one was, or
 * when the kernel's page map cannot be read. */
int tb_proc_maps_file_pages_only(uintptr_t lo, uintptr_t hi);

#endif
