/* The checks of the C test programs. No framework: each CHECK counts, a
 * failure prints where it happened, and a program exits non-zero when any
 * check failed. Each test program is one translation unit. */
#ifndef TB_CHECK_H
#define TB_CHECK_H

#include <inttypes.h>
#include <stdio.h>

static int checks;
static int failures;

#define CHECK(expr)                                                         \
    do {                                                                    \
        checks++;                                                           \
        if (!(expr)) {                                                      \
            failures++;                                                     \
            printf("%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #expr); \
        }                                                                   \
    } while (0)

/* Signed equality that also prints both values. */
#define CHECK_EQ(actual, expected)                                                                                  \
    do {                                                                                                            \
        intmax_t a_ = (intmax_t)(actual), e_ = (intmax_t)(expected);                                                \
        checks++;                                                                                                   \
        if (a_ != e_) {                                                                                             \
            failures++;                                                                                             \
            printf("%s:%d: CHECK_EQ(%s, %s) failed: %jd != %jd\n", __FILE__, __LINE__, #actual, #expected, a_, e_); \
        }                                                                                                           \
    } while (0)

/* The same for unsigned 64-bit values (byte sizes, pointers). */
#define CHECK_EQU(actual, expected)                                                                                  \
    do {                                                                                                             \
        uintmax_t a_ = (uintmax_t)(actual), e_ = (uintmax_t)(expected);                                              \
        checks++;                                                                                                    \
        if (a_ != e_) {                                                                                              \
            failures++;                                                                                              \
            printf("%s:%d: CHECK_EQU(%s, %s) failed: %ju != %ju\n", __FILE__, __LINE__, #actual, #expected, a_, e_); \
        }                                                                                                            \
    } while (0)

#endif
