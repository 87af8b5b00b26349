// Package codec reads the bounds-checked fields of kdb's encodings (uvarint
// lengths and counts, bytes, single bytes) for the packages that decode
// values from disk: after the first error every read returns zero values
// and Err stays set, so a decoder never panics on bad bytes and never
// allocates more than the input.
//
// It owns no on-disk format of its own; the formats are in docs/FORMAT.md.
package codec

import (
	"encoding/binary"
	"fmt"
)

// Decoder reads fields from B starting at Off.
type Decoder struct {
	B   []byte
	Off int
	Err error
}

func (d *Decoder) fail(what string) {
	if d.Err == nil {
		d.Err = fmt.Errorf("truncated %s at offset %d", what, d.Off)
	}
}

// Byte reads one byte.
func (d *Decoder) Byte() byte {
	if d.Err != nil || d.Off >= len(d.B) {
		d.fail("byte")
		return 0
	}
	c := d.B[d.Off]
	d.Off++
	return c
}

// Uvarint reads an unsigned varint.
func (d *Decoder) Uvarint() uint64 {
	if d.Err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.B[d.Off:])
	if n <= 0 {
		d.fail("varint")
		return 0
	}
	d.Off += n
	return v
}

// Bytes reads n bytes: a slice of B, capacity-limited so that appending to
// it never writes into B.
func (d *Decoder) Bytes(n uint64) []byte {
	if d.Err != nil {
		return nil
	}
	if n > uint64(len(d.B)-d.Off) {
		d.fail("bytes")
		return nil
	}
	s := d.B[d.Off : d.Off+int(n) : d.Off+int(n)]
	d.Off += int(n)
	return s
}
