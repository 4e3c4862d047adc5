/* config: the typed configuration of a fleet run, read from an INI file and --set overrides.
 *
 * Everything here is driven by the key table in common/config_keys.h: the struct has one
 * field per row (`section_key`), and the defaults, parser, range checks, dump and help
 * all walk the same table, so adding a row needs no edit in this module.
 *
 * Order of precedence: embedded defaults, then one INI file (--config), then each
 * --set section.key=value in the order given.
 *
 * Values (leading and trailing whitespace is ignored everywhere):
 *   INT     decimal integer with an optional sign ("12", "-3"); no fractions, exponents,
 *           hex, underscores or trailing text; must lie in the row's [min, max].
 *   FLOAT   strtod syntax ("0.5", "6.25e-5", "1e9"); nan, inf and trailing text are
 *           rejected; must lie in the row's [min, max]. Parsed and printed in the C numeric
 *           locale (fleet never calls setlocale).
 *   BOOL    true/false, yes/no, on/off, 1/0, case-insensitive.
 *   STRING  any text of at most FL_CONFIG_STRING_MAX - 1 bytes; one pair of surrounding
 *           double quotes is removed ("" is the empty string, quotes keep outer spaces).
 *           Control characters (newlines included) and a ';' that follows whitespace are
 *           rejected, because an INI file cannot hold them (see below).
 *   ENUM    one of the row's '|'-separated choices, case-insensitive; surrounding double
 *           quotes are removed as for STRING. The field holds the value's position among
 *           the choices, typed by the key's enum (fl_cfg_<section>_<key>, declared beside
 *           the key table in config_keys.h).
 *
 * INI syntax (fleet's own reader, common/config.c; as libinih's defaults read INI, plus the
 * rules below):
 *   - `[section]` lines and `key = value` lines (`key: value` is accepted too); lines
 *     starting with ';' or '#' are comments.
 *   - Inline comments: a ';' preceded by whitespace ends the value, so
 *     `lr = 0.001 ; comment` sets 0.001, while `name = a;b` keeps "a;b". '#' is a
 *     comment only at the start of a line: `lr = 0.001 # note` is an error (for a STRING
 *     key the text would be kept, so use ';' for inline comments).
 *   - Leading indentation is ignored: there are no continuation lines, so an indented
 *     line is an ordinary line (an indented bare word is a syntax error).
 *   - Lines of any length are accepted.
 *   - Text after `]` other than a comment, a key outside any section, a line that is
 *     neither a section, a key nor a comment, unknown sections and keys, and bad values
 *     are errors, and so is a key given twice in one file (the message names both
 *     lines); --set overrides whatever the file says.
 *
 * Errors (message in err, first error only, *c unchanged on failure):
 *   FL_IO_ERROR          the file cannot be opened or read
 *   FL_PARSE_ERROR       a malformed line, or a --set without `section.key=value`
 *   FL_NOT_FOUND         an unknown section or key
 *   FL_INVALID_ARGUMENT  a bad or out-of-range value, or a failed cross-key check
 * Messages name the place (`file:line`, or `--set assignment`), the key, the value given
 * and what is accepted, e.g.
 *   configs/x.ini:12: learner.batch_size = 0 is out of range (expected an integer in [1, 65536])
 *
 * Thread-safety: functions only touch the caller's struct and buffers; two threads may
 * load different structs at once. */
#ifndef FL_COMMON_CONFIG_H
#define FL_COMMON_CONFIG_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "common/config_keys.h"
#include "common/status.h"

/* Size of STRING fields, terminating NUL included. */
#define FL_CONFIG_STRING_MAX 256

#define FL__CONFIG_FIELD_INT(section, key) int64_t section##_##key;
#define FL__CONFIG_FIELD_FLOAT(section, key) double section##_##key;
#define FL__CONFIG_FIELD_BOOL(section, key) int section##_##key;
#define FL__CONFIG_FIELD_STRING(section, key) char section##_##key[FL_CONFIG_STRING_MAX];
#define FL__CONFIG_FIELD_ENUM(section, key) fl_cfg_##section##_##key section##_##key;
#define FL__CONFIG_FIELD(section, key, type, dflt, min, max, choices, help) FL__CONFIG_FIELD_##type(section, key)

/* One field per key, named section_key (learner.batch_size -> learner_batch_size).
 * A small value type: caller-allocated, copied by assignment. */
typedef struct fl_config {
    FL_CONFIG_KEYS(FL__CONFIG_FIELD)
} fl_config_t;

/* Sets every key to its embedded default. */
void fl_config_defaults(fl_config_t *c);

/* Applies an INI file on top of *c. See the file comment for the syntax and
 * the errors; e.g. "configs/x.ini:7: syntax error (expected `key = value` or `[section]`)",
 * "cannot open config file 'x.ini': No such file or directory". */
fl_status fl_config_load_file(fl_config_t *c, const char *path, fl_err_t *err);

/* The same for INI text held in memory (e.g. a launcher's config handed to a joining
 * actor); `name` stands for the file in messages. */
fl_status fl_config_load_string(fl_config_t *c, const char *text, const char *name, fl_err_t *err);

/* Applies one override "section.key=value" (the argument of --set); the location in
 * messages is "--set section.key=value". */
fl_status fl_config_set(fl_config_t *c, const char *assignment, fl_err_t *err);

/* Sets one key from separate strings. `value` is trimmed and parsed as described above;
 * `location` (may be NULL) prefixes messages as "location: ...". */
fl_status fl_config_set_kv(fl_config_t *c, const char *section, const char *key, const char *value,
                           const char *location, fl_err_t *err);

/* Cross-key checks that single-key ranges cannot express:
 *   replay.min_size_to_sample <= replay.capacity, learner.batch_size <= replay.capacity.
 * FL_INVALID_ARGUMENT with a message naming both keys and their values. */
fl_status fl_config_validate(const fl_config_t *c, fl_err_t *err);

/* Writes every key as an INI file that fl_config_load_file reads back to an identical
 * struct: sections in table order, each key preceded by a comment with its help, type,
 * accepted values and default. Floats use the shortest form that reads back bit-exactly
 * (at most %.17g); strings are written verbatim inside double quotes.
 * FL_INVALID_ARGUMENT if a field holds what no INI file can (a non-finite float, a string
 * without its NUL or with a control character or " ;"); FL_IO_ERROR if writing fails. */
fl_status fl_config_dump(const fl_config_t *c, FILE *f);

/* fl_config_dump into a new file at path (replaced if it exists). */
fl_status fl_config_write_file(const fl_config_t *c, const char *path, fl_err_t *err);

/* Prints every key: section.key, type, default, accepted range or choices, and help
 * (the text of `fleet help config`). */
void fl_config_print_help(FILE *f);
/* The same for the keys `only` names: a section ("eval": its keys), a key
 * ("learner.lr"), or else every key whose name contains it ("checkpoint"); NULL or ""
 * prints all. Returns the keys printed (0: nothing matched, nothing printed). */
size_t fl_config_print_help_of(FILE *f, const char *only);
/* The sections in table order, space-separated ("run env eval ..."), into buf. */
void fl_config_sections(char *buf, size_t len);

/* The value of key `name` ("learner.lr") as text, formatted as in the dump but without
 * quotes (booleans as true/false). FL_NOT_FOUND for an unknown key, FL_INVALID_ARGUMENT
 * if buf (len bytes) cannot hold the value and its NUL. */
fl_status fl_config_get_string(const fl_config_t *c, const char *name, char *buf, size_t len, fl_err_t *err);

/* The spelling of the value v of ENUM key `name` ("learner.mode", FL_CFG_MODE_GORILA ->
 * "gorila"), as in the key's choices; "" for a key that is not an ENUM or a value out of
 * range. */
const char *fl_config_enum_name(const char *name, int v);
/* The spelling of ENUM field section_key of *c: FL_CONFIG_ENUM_STR(c, learner, mode). */
#define FL_CONFIG_ENUM_STR(c, section, key) fl_config_enum_name(#section "." #key, (int)(c)->section##_##key)

/* Number of keys, and the name ("section.key") of key i in table order (NULL if i is out
 * of range): for tools that walk every key with fl_config_get_string. */
size_t fl_config_key_count(void);
const char *fl_config_key_name(size_t i);

/* 1 if every key of a and b holds the same value (floats compared bit for bit, strings
 * up to their NUL), else 0. */
int fl_config_equal(const fl_config_t *a, const fl_config_t *b);

/* The options shared by every verb: "--config FILE" (or --config=FILE, at most once) and
 * any number of "--set section.key=value" (or --set=section.key=value). Applies, in this
 * order, the defaults, the file, and the overrides in the order given (wherever --config
 * stands among them), then fl_config_validate. Scanning stops at "--", which is left in
 * place with everything after it.
 *
 * argv is compacted in place: on return (success or failure) argv[0..*argc) holds argv[0]
 * and the arguments that were not config options, in their original order, and
 * argv[*argc] is NULL if the count shrank. *c is written only on success. */
fl_status fl_config_from_args(fl_config_t *c, int *argc, char **argv, fl_err_t *err);

#endif
