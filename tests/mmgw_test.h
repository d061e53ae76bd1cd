/* A tiny test harness: CHECK macros that report file:line and keep going, a summary, and helpers to find
 * the golden data. A test program returns test_done() from main: 0 pass, 1 fail, 77 skipped. */
#ifndef MMGW_TEST_H
#define MMGW_TEST_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int test_failures__;
static int test_checks__;

#define CHECK(cond)                                                                                          \
    do {                                                                                                     \
        test_checks__++;                                                                                     \
        if (!(cond)) {                                                                                       \
            test_failures__++;                                                                               \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);                         \
        }                                                                                                    \
    } while (0)

#define CHECK_MSG(cond, ...)                                                                                 \
    do {                                                                                                     \
        test_checks__++;                                                                                     \
        if (!(cond)) {                                                                                       \
            test_failures__++;                                                                               \
            fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond);                         \
            fprintf(stderr, __VA_ARGS__);                                                                    \
            fputc('\n', stderr);                                                                             \
        }                                                                                                    \
    } while (0)

#define CHECK_EQ_INT(a, b)                                                                                   \
    do {                                                                                                     \
        long long a__ = (long long)(a), b__ = (long long)(b);                                                \
        CHECK_MSG(a__ == b__, "%s = %lld, %s = %lld", #a, a__, #b, b__);                                     \
    } while (0)

#define CHECK_STR(a, b)                                                                                      \
    do {                                                                                                     \
        const char *a__ = (a), *b__ = (b);                                                                   \
        CHECK_MSG(a__ &&b__ &&strcmp(a__, b__) == 0, "'%s' != '%s'", a__ ? a__ : "(null)",                   \
                  b__ ? b__ : "(null)");                                                                     \
    } while (0)

#define CHECK_NEAR(a, b, tol)                                                                                \
    do {                                                                                                     \
        double a__ = (double)(a), b__ = (double)(b);                                                         \
        CHECK_MSG(fabs(a__ - b__) <= (tol), "%s = %.9g, %s = %.9g (tol %g)", #a, a__, #b, b__,               \
                  (double)(tol));                                                                            \
    } while (0)

/** Print the reason and exit 77 (CTest "skipped"). */
static inline void test_skip(const char *why)
{
    printf("SKIP: %s\n", why);
    exit(77);
}

/** The golden-data folder (../shared/testdata from the repo root), or NULL when this checkout has none. */
static inline const char *test_data_dir(void)
{
    const char *d = getenv("MMGW_TESTDATA");
    struct stat st;
    if (d && stat(d, &st) == 0 && S_ISDIR(st.st_mode)) return d;
    return NULL;
}

/** Like test_data_dir, but skip the test with a clear reason when the data is absent. */
static inline const char *test_require_data(void)
{
    const char *d = test_data_dir();
    if (!d)
        test_skip("golden data not found (../shared/testdata from the repo root; set MMGW_TESTDATA): a plain "
                  "clone has none");
    return d;
}

static inline int test_done(void)
{
    if (test_failures__) {
        fprintf(stderr, "FAILED: %d of %d checks\n", test_failures__, test_checks__);
        return 1;
    }
    printf("ok: %d checks\n", test_checks__);
    return 0;
}

#endif
