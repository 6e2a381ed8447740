#include "tb_intervals.h"

#include <stddef.h>

/* A node's heap priority, from its address: the nodes are headers of live
 * storages, so addresses are distinct, and the mix makes their order
 * independent of the keys (splitmix64's finalizer, a bijection). */
static uint64_t priority(const tb_range *r)
{
    uint64_t x = (uint64_t)(uintptr_t)r;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* Keys are (lo, address): equal starts are ordered, and each key unique. */
static int before(const tb_range *a, const tb_range *b)
{
    return a->lo < b->lo || (a->lo == b->lo && (uintptr_t)a < (uintptr_t)b);
}

static void update(tb_range *r)
{
    uintptr_t m = r->hi;
    if (r->left && r->left->max_hi > m)
        m = r->left->max_hi;
    if (r->right && r->right->max_hi > m)
        m = r->right->max_hi;
    r->max_hi = m;
}

static tb_range *rotate_right(tb_range *r)
{
    tb_range *l = r->left;
    r->left = l->right;
    l->right = r;
    update(r);
    update(l);
    return l;
}

static tb_range *rotate_left(tb_range *r)
{
    tb_range *x = r->right;
    r->right = x->left;
    x->left = r;
    update(r);
    update(x);
    return x;
}

/* The recursions below go as deep as the treap: O(log n) expected. */
static tb_range *insert(tb_range *root, tb_range *r)
{
    if (!root) {
        r->left = r->right = NULL;
        r->max_hi = r->hi;
        return r;
    }
    /* A new range can only raise the maxima on its path: no need to read
     * the other children (each a cache miss) unless a rotation happens. */
    if (r->hi > root->max_hi)
        root->max_hi = r->hi;
    if (before(r, root)) {
        root->left = insert(root->left, r);
        if (priority(root->left) > priority(root))
            return rotate_right(root);
    } else {
        root->right = insert(root->right, r);
        if (priority(root->right) > priority(root))
            return rotate_left(root);
    }
    return root;
}

/* Every key of a comes before every key of b. */
static tb_range *merge(tb_range *a, tb_range *b)
{
    if (!a)
        return b;
    if (!b)
        return a;
    if (priority(a) > priority(b)) {
        a->right = merge(a->right, b);
        update(a);
        return a;
    }
    b->left = merge(a, b->left);
    update(b);
    return b;
}

static tb_range *remove_node(tb_range *root, tb_range *r)
{
    if (!root)
        return NULL; /* not in the set: nothing to do */
    if (root == r) {
        tb_range *rest = merge(r->left, r->right);
        r->left = r->right = NULL;
        return rest;
    }
    if (before(r, root))
        root->left = remove_node(root->left, r);
    else
        root->right = remove_node(root->right, r);
    /* Only a maximum that may have been r's needs computing again. */
    if (root->max_hi <= r->hi)
        update(root);
    return root;
}

void tb_intervals_insert(tb_range **root, tb_range *r)
{
    *root = insert(*root, r);
}

void tb_intervals_remove(tb_range **root, tb_range *r)
{
    *root = remove_node(*root, r);
}

const tb_range *tb_intervals_find(const tb_range *n, uintptr_t lo, uintptr_t hi)
{
    /* If the left subtree reaches past lo but none of it overlaps, the
     * range that reaches furthest starts at or after hi, and so does all
     * of the right subtree: one path down suffices. */
    while (n) {
        if (n->lo < hi && lo < n->hi)
            return n;
        n = n->left && n->left->max_hi > lo ? n->left : n->right;
    }
    return NULL;
}

tb_range *tb_intervals_at(tb_range *n, uintptr_t lo)
{
    /* Ranges that start at lo come after every key with a smaller start
     * and before every key with a larger one: one path down. */
    while (n && n->lo != lo)
        n = lo < n->lo ? n->left : n->right;
    return n;
}
