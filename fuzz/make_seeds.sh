#!/bin/sh
# Writes the seed corpora for the fuzz harnesses (see the input formats at
# the top of fuzz_layout.c and fuzz_dtype.c). The seeds are committed; run
# this again only to change them.
set -eu
cd "$(dirname "$0")"
L=corpus/layout
D=corpus/dtype
O=corpus/overlap
mkdir -p "$L" "$D" "$O"

# layout: dtype byte (bit 7: row-major strides), ndim, ptr mode [ptr bytes],
# then per dimension a shape value and a stride value (bytes < 0x80 are
# 0..15; 0x80 -1, 0x81 INT64_MAX, 0x82 INT64_MIN, 0x83 2^62, 0x84 2^32).
printf '\013\002\001\003\004\004\001' > $L/float32-3x4          # {3,4} strides [4,1] at 0x1000
printf '\213\003\001\002\000\003\000\004\000' > $L/rowmajor-2x3x4 # row-major {2,3,4}
printf '\005\002\000\000\000\003\001' > $L/int64-zero-dim-null     # {0,3} at ptr 0
printf '\014\002\001\203\000\203\000' > $L/numel-overflow          # {2^62, 2^62}
printf '\005\001\012\002\001' > $L/misaligned                      # int64 at 0x1001
printf '\000\001\003\017\001' > $L/ptr-wraps                       # 15 bytes at UINT64_MAX
printf '\000\102' > $L/too-many-dims                               # ndim 64 + 2
printf '\000\001\001\200\001' > $L/negative-dim                    # {-1}
printf '\013\002\001\005\000\004\001' > $L/broadcast-stride-0      # {5,4} strides [0,1]
printf '\013\001\001\002\201' > $L/extent-overflow                 # {2} stride INT64_MAX
printf '\016\001\001\001\007\000\000\000\000\000\020\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\020\000\000\000\000\000\000' \
    > $L/extent-inside                                             # complex128 {1} + extent values
printf '\201\002\001\201\000\001\000' > $L/rowmajor-max-by-1       # row-major {INT64_MAX, 1}, uint8

# dtype: code, bits, lanes (uint32 LE each), Nx bits (uint64 LE), then a
# string used as a name and as an Nx kind.
hdr() { # code bits lanes nxbits -> 20 bytes
    printf "$(printf '\\%03o\\000\\000\\000\\%03o\\000\\000\\000\\%03o\\000\\000\\000\\%03o\\000\\000\\000\\000\\000\\000\\000' "$1" "$2" "$3" "$4")"
}
{ hdr 2 32 1 32; printf 'float32'; } > $D/float32
{ hdr 4 16 1 16; printf 'bf'; } > $D/bf16
{ hdr 5 128 1 128; printf 'complex_double'; } > $D/complex-alias
{ hdr 10 8 1 8; printf 'f8_e4m3fn'; } > $D/f8-e4m3fn
{ hdr 6 8 1 8; printf 'bool'; } > $D/bool
{ hdr 1 8 4 8; printf 'u'; } > $D/lanes-4
{ hdr 2 16 1 16; printf 'half'; } > $D/half
{ hdr 0 64 1 64; } > $D/empty-int64
{ hdr 12 8 1 8; printf 'float8_e5m2\000junk'; } > $D/embedded-nul

# overlap: ndim, bound byte (0: generous), rotation, then per dimension a
# shape byte and a stride byte (0xf0 and up: wider values follow).
printf '\002\000\001\004\002\003\003' > $O/4x3-strides-2-3          # shares memory
printf '\003\000\002\002\001\002\004\002\005' > $O/2x2x2-strides-1-4-5 # shares memory
printf '\002\000\001\360\015\100\002\003\003' > $O/200000x3-strides-2-3 # {3392,3}: too large for the model
printf '\002\000\001\003\002\002\003' > $O/3x2-disjoint             # interleaved, disjoint
printf '\003\000\001\002\014\003\004\004\001' > $O/row-major-2x3x4
printf '\002\020\001\360\003\350\360\000\000\003\350\360\003\350\360\000\000\003\351' > $O/1000x1000-bounded

# safetensors: the data buffer's size (2 bytes, little-endian), then the
# header's JSON.
S=corpus/safetensors
mkdir -p "$S"
st() { printf "\\$(printf '%03o' $(($1 % 256)))\\$(printf '%03o' $(($1 / 256)))"; printf '%s' "$2"; }
st 24 '{"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]}}' > $S/one-f32
st 11 '{"b":{"dtype":"I64","shape":[],"data_offsets":[0,8]},"c":{"dtype":"U8","shape":[3],"data_offsets":[8,11]}}' > $S/scalar-and-u8
st 0 '{"e":{"dtype":"BF16","shape":[0,4],"data_offsets":[0,0]}}     ' > $S/empty-padded
st 2 '{"n\u00e9\ud83d\ude00":{"dtype":"BOOL","shape":[2],"data_offsets":[0,2],"extra":[{"x":null}]}}' > $S/escapes-extra
st 4 '{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"a":{"dtype":"U8","shape":[2],"data_offsets":[2,4]}}' > $S/duplicate
st 3 '{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"U8","shape":[2],"data_offsets":[1,3]}}' > $S/overlap
st 0 '{"w":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,0]}}' > $S/overflow
st 1 '{"w":{"dtype":"F4","shape":[1],"data_offsets":[0,1]}}' > $S/unknown-dtype
st 0 '{"__metadata__":{"k":1}}' > $S/bad-metadata
