package broker

import (
	"errors"
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
	f.Fuzz(func(t *testing.T, b []byte) {
		if _, err := decodeMessage(b); err != nil && !errors.Is(err, kdb.ErrCorrupt) {
			t.Fatalf("error not kdb.ErrCorrupt: %v", err)
		}
	})
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
