/* crc32c: CRC-32C (Castagnoli: reflected polynomial 0x82F63B78, initial value and final
 * xor 0xFFFFFFFF), the checksum of TFRecord files such as TensorBoard's event files, and
 * TFRecord's masking of a stored CRC.
 *
 * Check value: fl_crc32c("123456789", 9) == 0xE3069283. Table-driven, slicing by 8 bytes;
 * the same result on every host (bytes are read one by one, never as host words).
 * Thread-safety: pure functions; the tables are built once, on first use, under
 * pthread_once, so any number of threads may call them at once. */
#ifndef FL_COMMON_CRC32C_H
#define FL_COMMON_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* The CRC-32C of n bytes (data may be NULL when n is 0). */
uint32_t fl_crc32c(const void *data, size_t n);
/* Continues a CRC over more bytes: crc is the result of an earlier call (0 to start), so
 * fl_crc32c_extend(fl_crc32c(a, na), b, nb) equals the CRC of a followed by b. */
uint32_t fl_crc32c_extend(uint32_t crc, const void *data, size_t n);

/* TFRecord's masked CRC, ((crc >> 15) | (crc << 17)) + 0xa282ead8 (mod 2^32): what a
 * record stores, so that the CRC of bytes that hold CRCs is not trivially related. */
uint32_t fl_crc32c_mask(uint32_t crc);
/* The inverse of fl_crc32c_mask. */
uint32_t fl_crc32c_unmask(uint32_t masked);

#endif
