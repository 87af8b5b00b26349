package journal

import (
	"encoding/binary"
	"errors"
	"testing"
)

// TestRecordFrame_DecodeResealed guards the header checks of decodeRecHeader
// that the checksum does not already make redundant. TestRecordFrame_Decode
// damages a field without resealing the frame, so its cases fail on the
// checksum whether or not the field's own check exists. Here every frame
// carries a correct sum over its damaged header: only the field check can
// refuse it (a frame claiming a synced offset after itself would otherwise
// count as proof that later damage was durable; unknown flags or reserved
// bytes are a format this build does not know).
func TestRecordFrame_DecodeResealed(t *testing.T) {
	const seed, off = 99, 640
	payload := []byte("the payload of a record")
	reseal := func(f func(b []byte)) []byte {
		b, _ := appendFrame(nil, seed, off, 12345, 512, 3, flagBatchBegin, payload)
		f(b)
		binary.LittleEndian.PutUint64(b[recOffSum:], recordSum(seed, off, b[recOffPrev:recHeaderSize], payload))
		return b
	}
	cases := []struct {
		name string
		in   []byte
	}{
		{"synced after the record", reseal(func(b []byte) { binary.LittleEndian.PutUint32(b[recOffSynced:], off+8) })},
		{"unknown flag", reseal(func(b []byte) { b[recOffFlags] |= 0x80 })},
		{"reserved byte set", reseal(func(b []byte) { b[recOffReserved+2] = 1 })},
	}
	// The synced field may equal the record's own offset (the first frame
	// of a segment, or one written right after a sync).
	atOff, _ := appendFrame(nil, seed, off, 12345, off, 3, flagBatchBegin, payload)
	if _, _, err := decodeFrame(atOff, seed, 5, off, 1<<20); err != nil {
		t.Fatalf("synced at the record's own offset: %v", err)
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h, err := decodeRecHeader(tc.in, 5, off, 1<<20, int64(len(tc.in)))
			if err == nil {
				// The sum is right: without the check the frame verifies.
				err = verifyRecord(h, tc.in, tc.in[recHeaderSize:recHeaderSize+int(h.length)], seed, 5, off)
				t.Fatalf("resealed frame accepted (verify: %v)", err)
			}
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("err %v, want ErrCorrupt", err)
			}
		})
	}
}
