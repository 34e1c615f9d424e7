/*
 * The NetDAM ALU (PROTOCOL.md section 4), ported from netdam-common/src/alu.rs.
 * f32 is integer arithmetic on the bit patterns: HLS float cores flush
 * subnormals to zero, which section 4 forbids, and native float would pass
 * C simulation and disagree on the card.
 */
#include "netdam_core.h"

#define F32_CANONICAL_NAN 0x7FC00000u
#define SIGN 0x80000000u
#define EXP_MASK 0xFFu
#define FRAC_MASK 0x007FFFFFu
#define IMPLICIT 0x00800000u

static bool is_nan(uint32_t x) { return ((x >> 23) & EXP_MASK) == EXP_MASK && (x & FRAC_MASK) != 0u; }

/* Leading zeros of a non-zero u32, by halving (constant steps). */
static uint32_t leading_zeros(uint32_t x)
{
    uint32_t n = 0;
    if (x == 0u) {
        return 32u;
    }
    if ((x & 0xFFFF0000u) == 0u) {
        n += 16u;
        x <<= 16;
    }
    if ((x & 0xFF000000u) == 0u) {
        n += 8u;
        x <<= 8;
    }
    if ((x & 0xF0000000u) == 0u) {
        n += 4u;
        x <<= 4;
    }
    if ((x & 0xC0000000u) == 0u) {
        n += 2u;
        x <<= 2;
    }
    if ((x & 0x80000000u) == 0u) {
        n += 1u;
    }
    return n;
}

uint32_t netdam_f32_add(uint32_t a, uint32_t b)
{
    uint32_t sign, ea, eb, ma, mb, e, d, low, m;
    if (is_nan(a) || is_nan(b)) {
        return F32_CANONICAL_NAN;
    }
    /* Order by magnitude: |a| >= |b|. */
    if ((a & ~SIGN) < (b & ~SIGN)) {
        uint32_t t = a;
        a = b;
        b = t;
    }
    sign = a & SIGN;
    ea = (a >> 23) & EXP_MASK;
    eb = (b >> 23) & EXP_MASK;
    if (ea == EXP_MASK) {
        /* a is infinite: inf - inf is NaN, otherwise a. */
        if (eb == EXP_MASK && ((a ^ b) & SIGN) != 0u) {
            return F32_CANONICAL_NAN;
        }
        return a;
    }
    if ((b & ~SIGN) == 0u) {
        /* b is a zero: a + 0 = a, except -0 + +0 = +0. */
        if ((a & ~SIGN) == 0u) {
            return a & b;
        }
        return a;
    }
    /* Significands with 3 guard/round/sticky bits; subnormals have exponent 1. */
    ma = (ea == 0u ? (a & FRAC_MASK) : ((a & FRAC_MASK) | IMPLICIT)) << 3;
    mb = (eb == 0u ? (b & FRAC_MASK) : ((b & FRAC_MASK) | IMPLICIT)) << 3;
    e = ea == 0u ? 1u : ea;
    eb = eb == 0u ? 1u : eb;
    d = e - eb;
    if (d >= 27u) {
        mb = mb != 0u ? 1u : 0u;
    } else if (d > 0u) {
        uint32_t lost = mb & ((1u << d) - 1u);
        mb = (mb >> d) | (lost != 0u ? 1u : 0u);
    }
    if (((a ^ b) & SIGN) == 0u) {
        ma += mb;
        if (ma >= (1u << 27)) {
            ma = (ma >> 1) | (ma & 1u);
            e += 1u;
        }
    } else {
        uint32_t lz, shift;
        ma -= mb;
        if (ma == 0u) {
            /* Exact cancellation gives +0 in round-to-nearest. */
            return 0u;
        }
        /* Normalize so bit 26 is set, but not below exponent 1 (subnormal). */
        lz = leading_zeros(ma) - 5u;
        shift = lz < e - 1u ? lz : e - 1u;
        ma <<= shift;
        e -= shift;
    }
    low = ma & 7u;
    m = ma >> 3;
    if (low > 4u || (low == 4u && (m & 1u) != 0u)) {
        m += 1u;
        if (m == (1u << 24)) {
            m >>= 1;
            e += 1u;
        }
    }
    if (e >= EXP_MASK) {
        return sign | (EXP_MASK << 23);
    }
    if (m < IMPLICIT) {
        return sign | m;
    }
    return sign | (e << 23) | (m & FRAC_MASK);
}

/* An unsigned key in the numeric order of non-NaN floats, -0 < +0. */
static uint32_t f32_key(uint32_t x) { return (x & SIGN) != 0u ? ~x : (x | SIGN); }

/* f32 MIN/MAX: a NaN operand yields the other; two NaNs the canonical NaN. */
static uint32_t f32_pick(uint32_t a, uint32_t b, bool want_min)
{
    bool an = is_nan(a), bn = is_nan(b);
    if (an && bn) {
        return F32_CANONICAL_NAN;
    }
    if (an) {
        return b;
    }
    if (bn) {
        return a;
    }
    return ((f32_key(a) < f32_key(b)) == want_min) ? a : b;
}

uint32_t netdam_combine32(uint8_t dtype, uint8_t alu, uint32_t a, uint32_t b)
{
    if (dtype == NETDAM_F32) {
        if (alu == NETDAM_ADD) {
            return netdam_f32_add(a, b);
        }
        return f32_pick(a, b, alu == NETDAM_MIN);
    }
    switch (alu) {
    case NETDAM_ADD:
        return a + b;
    case NETDAM_MIN:
        if (dtype == NETDAM_I32) {
            return (int32_t)a < (int32_t)b ? a : b;
        }
        return a < b ? a : b;
    case NETDAM_MAX:
        if (dtype == NETDAM_I32) {
            return (int32_t)a > (int32_t)b ? a : b;
        }
        return a > b ? a : b;
    case NETDAM_AND:
        return a & b;
    case NETDAM_OR:
        return a | b;
    default:
        return a ^ b;
    }
}

uint64_t netdam_combine64(uint8_t dtype, uint8_t alu, uint64_t a, uint64_t b)
{
    switch (alu) {
    case NETDAM_ADD:
        return a + b;
    case NETDAM_MIN:
        if (dtype == NETDAM_I64) {
            return (int64_t)a < (int64_t)b ? a : b;
        }
        return a < b ? a : b;
    case NETDAM_MAX:
        if (dtype == NETDAM_I64) {
            return (int64_t)a > (int64_t)b ? a : b;
        }
        return a > b ? a : b;
    case NETDAM_AND:
        return a & b;
    case NETDAM_OR:
        return a | b;
    default:
        return a ^ b;
    }
}
