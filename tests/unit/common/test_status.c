#include "mm_buf.h"
#include "mm_status.h"
#include "mmgw_test.h"

int main(void)
{
    CHECK_STR(mm_status_name(MM_INVALID), "INVALID");
    CHECK_STR(mm_strerror(MM_NOMEM), "out of memory");
    CHECK_STR(mm_status_name(12345), "UNKNOWN");
    struct mm_err e;
    mm_err_clear(&e);
    CHECK_EQ_INT(mm_err_set(&e, MM_FORMAT, "bad %d", 7), MM_FORMAT);
    CHECK_STR(e.msg, "bad 7");
    mm_err_prefix(&e, "file %s", "x");
    CHECK_STR(e.msg, "file x: bad 7");
    CHECK_EQ_INT(mm_err_set(NULL, MM_IO, "ignored"), MM_IO);

    struct mm_buf b;
    mm_buf_init(&b, 10);
    CHECK_EQ_INT(mm_buf_append_str(&b, "hello"), 0);
    CHECK_EQ_INT(mm_buf_printf(&b, "%d", 1234), 0);
    CHECK_STR(b.data, "hello1234");
    CHECK_EQ_INT(mm_buf_append_str(&b, "xy"), -1); /* over the cap of 10 */
    mm_buf_consume(&b, 5);
    CHECK_STR(b.data, "1234");
    mm_buf_free(&b);
    return test_done();
}
