/* This build's identity in /dev/shm (tb_shm_names.h): its token, the lock
 * that says it lives, the journal of the references it holds in
 * PyTorch-format headers, and the reaper that releases them once the VM is
 * gone. Made with the first region; no BEAM here.
 *
 * Each build loaded has its own (its own statics): a hot upgrade takes a
 * new token, so names never repeat across builds. When the lock or the
 * journal is deleted under the VM (by a program of the same user), the
 * next name made takes a new identity: names made after that are never
 * judged dead while the VM lives. */
#ifndef TB_SHM_OWNER_H
#define TB_SHM_OWNER_H

#include <stddef.h>
#include <stdint.h>

/* A slot of the journal: where one reference is recorded. */
typedef struct {
    struct tb_shm_journal *journal; /* NULL: none */
    uint32_t index;
} tb_shm_ref;

/* Writes a new name, "/" prefix token "." n, into out (NAME_MAX + 2
 * bytes); makes or renews the identity first. 1, or 0 with *error. */
int tb_shm_owner_name(const char *prefix, char *out, size_t size, int *error);

/* Records name in a new slot of the journal in state (TB_SLOT_MADE, or
 * TB_SLOT_FREE until tb_shm_owner_hold). 1, or 0 with *error. */
int tb_shm_owner_record(const char *name, uint32_t state, tb_shm_ref *ref, int *error);
/* The reference is taken: its slot says so. */
void tb_shm_owner_hold(const tb_shm_ref *ref);
/* Frees the slot: called before the reference is dropped, so that a VM
 * that dies between the two leaves a reference, never drops one twice.
 * 1 when the caller drops it; 0 when the record was taken already (by a
 * reclaimer that judged this VM dead and dropped it). */
int tb_shm_owner_forget(tb_shm_ref *ref);

/* Releases the tokens of creators that are gone, this build's excepted. */
int tb_shm_owner_reclaim(void);

#endif
