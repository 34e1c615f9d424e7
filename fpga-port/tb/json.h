/* A small JSON reader for the testbench (not part of the engine). */
#ifndef TB_JSON_H
#define TB_JSON_H

#include <stddef.h>
#include <stdint.h>

typedef struct json json_t;

json_t *json_parse(const char *text);
void json_free(json_t *v);
/* A member of an object, or NULL. */
const json_t *json_get(const json_t *obj, const char *key);
/* Element i of an array; the length of an array (0 for anything else). */
const json_t *json_at(const json_t *arr, size_t i);
size_t json_len(const json_t *arr);
/* Scalars; they exit with a message when the value is of another kind. */
const char *json_str(const json_t *v);
uint64_t json_u64(const json_t *v);
int json_bool(const json_t *v);

#endif
