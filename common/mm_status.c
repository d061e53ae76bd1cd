#include "mm_status.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

const char *mm_status_name(int32_t code)
{
    switch (code) {
#define MM__STATUS_NAME(name, c, text)                                                                       \
    case c:                                                                                                  \
        return #name;
        MM_STATUS_MAP(MM__STATUS_NAME)
#undef MM__STATUS_NAME
    }
    return "UNKNOWN";
}

const char *mm_strerror(int32_t code)
{
    switch (code) {
#define MM__STATUS_TEXT(name, c, text)                                                                       \
    case c:                                                                                                  \
        return text;
        MM_STATUS_MAP(MM__STATUS_TEXT)
#undef MM__STATUS_TEXT
    }
    return "unknown error";
}

int32_t mm_err_set(struct mm_err *err, int32_t code, const char *fmt, ...)
{
    if (!err) return code;
    err->code = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    return code;
}

int32_t mm_err_prefix(struct mm_err *err, const char *fmt, ...)
{
    if (!err) return MM_ERROR;
    char head[256], old[sizeof err->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(head, sizeof head, fmt, ap);
    va_end(ap);
    memcpy(old, err->msg, sizeof old);
    /* truncation is fine: the message stays one readable line */
    size_t hl = strlen(head);
    if (hl > sizeof err->msg - 3) hl = sizeof err->msg - 3;
    memcpy(err->msg, head, hl);
    memcpy(err->msg + hl, ": ", 2);
    size_t room = sizeof err->msg - hl - 3, ol = strnlen(old, sizeof old);
    if (ol > room) ol = room;
    memcpy(err->msg + hl + 2, old, ol);
    err->msg[hl + 2 + ol] = '\0';
    return err->code;
}

void mm_err_clear(struct mm_err *err)
{
    if (!err) return;
    err->code = MM_OK;
    err->msg[0] = '\0';
}
