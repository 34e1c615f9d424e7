/* A small JSON reader for the testbench: objects, arrays, strings without
 * escapes beyond \" \\ \/ \n \t and \uXXXX (kept as '?'), unsigned
 * integers, true, false, null. */
#include "json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum kind { J_NULL, J_BOOL, J_NUM, J_STR, J_ARR, J_OBJ };

struct json {
    enum kind kind;
    uint64_t num;
    char *str;       /* J_STR: the string; J_OBJ members: the key */
    json_t **items;  /* J_ARR elements, J_OBJ members */
    size_t len;
};

static void fail(const char *what, const char *at)
{
    fprintf(stderr, "JSON: %s at \"%.20s\"\n", what, at);
    exit(2);
}

static const char *ws(const char *p)
{
    while (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t') {
        p++;
    }
    return p;
}

static json_t *node(enum kind k)
{
    json_t *v = calloc(1, sizeof *v);
    if (v == NULL) {
        fail("out of memory", "");
    }
    v->kind = k;
    return v;
}

static void push(json_t *v, json_t *item)
{
    json_t **items = realloc(v->items, (v->len + 1) * sizeof *items);
    if (items == NULL) {
        fail("out of memory", "");
    }
    v->items = items;
    v->items[v->len++] = item;
}

static const char *string(const char *p, char **out)
{
    size_t cap = 16, n = 0;
    char *s = malloc(cap);
    if (s == NULL || *p != '"') {
        fail("expected a string", p);
    }
    p++;
    while (*p != '"') {
        char c = *p++;
        if (c == '\0') {
            fail("unterminated string", p);
        }
        if (c == '\\') {
            c = *p++;
            if (c == 'n') {
                c = '\n';
            } else if (c == 't') {
                c = '\t';
            } else if (c == 'u') {
                p += 4;
                c = '?';
            }
        }
        if (n + 1 >= cap) {
            cap *= 2;
            s = realloc(s, cap);
            if (s == NULL) {
                fail("out of memory", "");
            }
        }
        s[n++] = c;
    }
    s[n] = '\0';
    *out = s;
    return p + 1;
}

static const char *value(const char *p, json_t **out);

static const char *value(const char *p, json_t **out)
{
    json_t *v;
    p = ws(p);
    if (*p == '{' || *p == '[') {
        char close = *p == '{' ? '}' : ']';
        v = node(*p == '{' ? J_OBJ : J_ARR);
        p = ws(p + 1);
        while (*p != close) {
            json_t *item;
            char *key = NULL;
            if (v->kind == J_OBJ) {
                p = string(ws(p), &key);
                p = ws(p);
                if (*p != ':') {
                    fail("expected ':'", p);
                }
                p++;
            }
            p = value(p, &item);
            item->str = item->kind == J_STR ? item->str : NULL;
            if (key != NULL) {
                /* Members keep their key beside their value. */
                json_t *m = node(J_OBJ);
                m->str = key;
                push(m, item);
                push(v, m);
            } else {
                push(v, item);
            }
            p = ws(p);
            if (*p == ',') {
                p = ws(p + 1);
            } else if (*p != close) {
                fail("expected ',' or the end", p);
            }
        }
        *out = v;
        return p + 1;
    }
    if (*p == '"') {
        v = node(J_STR);
        p = string(p, &v->str);
        *out = v;
        return p;
    }
    if (strncmp(p, "true", 4) == 0 || strncmp(p, "false", 5) == 0) {
        v = node(J_BOOL);
        v->num = *p == 't';
        *out = v;
        return p + (*p == 't' ? 4 : 5);
    }
    if (strncmp(p, "null", 4) == 0) {
        *out = node(J_NULL);
        return p + 4;
    }
    if (*p >= '0' && *p <= '9') {
        char *end;
        v = node(J_NUM);
        v->num = strtoull(p, &end, 10);
        *out = v;
        return end;
    }
    fail("unexpected value", p);
    return p;
}

json_t *json_parse(const char *text)
{
    json_t *v;
    value(text, &v);
    return v;
}

void json_free(json_t *v)
{
    size_t i;
    if (v == NULL) {
        return;
    }
    for (i = 0; i < v->len; i++) {
        json_free(v->items[i]);
    }
    free(v->items);
    free(v->str);
    free(v);
}

const json_t *json_get(const json_t *obj, const char *key)
{
    size_t i;
    if (obj == NULL || obj->kind != J_OBJ) {
        return NULL;
    }
    for (i = 0; i < obj->len; i++) {
        const json_t *m = obj->items[i];
        if (m->str != NULL && strcmp(m->str, key) == 0 && m->len == 1) {
            return m->items[0];
        }
    }
    return NULL;
}

const json_t *json_at(const json_t *arr, size_t i)
{
    if (arr == NULL || arr->kind != J_ARR || i >= arr->len) {
        fail("no such array element", "");
    }
    return arr->items[i];
}

size_t json_len(const json_t *arr) { return arr != NULL && arr->kind == J_ARR ? arr->len : 0; }

const char *json_str(const json_t *v)
{
    if (v == NULL || v->kind != J_STR) {
        fail("expected a string value", "");
    }
    return v->str;
}

uint64_t json_u64(const json_t *v)
{
    if (v == NULL || v->kind != J_NUM) {
        fail("expected a number", "");
    }
    return v->num;
}

int json_bool(const json_t *v)
{
    if (v == NULL || v->kind != J_BOOL) {
        fail("expected true or false", "");
    }
    return (int)v->num;
}
