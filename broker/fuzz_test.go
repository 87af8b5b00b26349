package broker

import (
	"encoding/binary"
	"errors"
	"math"
	"runtime"
	"testing"

	"github.com/kdb-project/kdb"
)

// The decoders of what the broker reads back from its trees (a message, a
// prepared transaction) never panic and report damage as kdb.ErrCorrupt.
// Their seed corpora run in every go test; go test -fuzz FuzzX ./broker
// explores.

func FuzzDecodeMessage(f *testing.F) {
	f.Add(encodeMessage(&Message{ID: "m-1", ProducerID: "p", ProducerSeq: 7, Properties: map[string]string{"a": "b"}, Body: []byte("body")}))
	f.Add([]byte{msgVersion, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Add(binary.AppendUvarint([]byte{msgVersion, 0, 0, 0}, 1<<16)) // more properties than bytes
	f.Fuzz(func(t *testing.T, b []byte) {
		if _, err := decodeMessage(b); err != nil && !errors.Is(err, kdb.ErrCorrupt) {
			t.Fatalf("error not kdb.ErrCorrupt: %v", err)
		}
	})
}

// TestDecodeMessage_PropertyCountBoundedBeforeAllocation: a damaged
// message record that claims more properties than its bytes can hold (each
// takes two bytes at least) is kdb.ErrCorrupt before anything is allocated
// for them. Decoding sized the properties' map by the claim: 9 bytes
// claiming 2^28 properties asked for ~10 GiB. The claim here is small
// enough that a decoder without the bound allocates a few MiB only, which
// the test measures (the least of a few runs, in case anything else
// allocates meanwhile).
func TestDecodeMessage_PropertyCountBoundedBeforeAllocation(t *testing.T) {
	const claim = 1 << 16
	b := binary.AppendUvarint([]byte{msgVersion, 0, 0, 0}, claim)
	least := uint64(math.MaxUint64)
	var before, after runtime.MemStats
	for range 3 {
		runtime.ReadMemStats(&before)
		_, err := decodeMessage(b)
		runtime.ReadMemStats(&after)
		if !errors.Is(err, kdb.ErrCorrupt) {
			t.Fatalf("decode of %d bytes claiming %d properties: %v, want kdb.ErrCorrupt", len(b), claim, err)
		}
		least = min(least, after.TotalAlloc-before.TotalAlloc)
	}
	if least > 16<<10 {
		t.Fatalf("decode of %d bytes claiming %d properties allocated %d bytes before its error", len(b), claim, least)
	}
}

func FuzzDecodeTx(f *testing.F) {
	f.Add(encodeTx([]txOp{{kind: txSend, dk: Queue, dest: "q", msg: &Message{ID: "m", Body: []byte("x")}},
		{kind: txAck, dk: Queue, dest: "q", seqs: []uint64{1, 2}}}))
	f.Add([]byte{txVersion, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, b []byte) {
		if _, err := decodeTx(b); err != nil && !errors.Is(err, kdb.ErrCorrupt) {
			t.Fatalf("error not kdb.ErrCorrupt: %v", err)
		}
	})
}
