// Package checksum holds kdb's checksums: xxhash64, optionally seeded so that
// bytes written by another file generation never verify.
//
// It knows nothing of file formats. It is safe for concurrent use.
package checksum

import (
	"encoding/binary"

	"github.com/cespare/xxhash/v2"
)

// Sum64 returns the xxhash64 of b.
func Sum64(b []byte) uint64 { return xxhash.Sum64(b) }

// Sum32 returns the low 32 bits of the xxhash64 of b.
func Sum32(b []byte) uint32 { return uint32(xxhash.Sum64(b)) }

// Seeded returns the xxhash64 of the 8-byte little-endian seed followed by b.
// A record checksummed with one seed never verifies under another.
func Seeded(seed uint64, b []byte) uint64 {
	d := xxhash.New()
	var s [8]byte
	binary.LittleEndian.PutUint64(s[:], seed)
	_, _ = d.Write(s[:])
	_, _ = d.Write(b)
	return d.Sum64()
}

// Seeded2 is Seeded over the concatenation of a and b, without copying.
func Seeded2(seed uint64, a, b []byte) uint64 {
	d := xxhash.New()
	var s [8]byte
	binary.LittleEndian.PutUint64(s[:], seed)
	_, _ = d.Write(s[:])
	_, _ = d.Write(a)
	_, _ = d.Write(b)
	return d.Sum64()
}
