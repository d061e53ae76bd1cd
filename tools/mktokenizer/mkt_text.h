/* Built-in training text for mmgw-mktokenizer. */
#ifndef MKT_TEXT_H
#define MKT_TEXT_H

extern const char mkt_builtin_text[];

#endif
