package raftkdb

import (
	"bytes"
	"encoding/hex"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

func sameLog(a, b *raft.Log) bool {
	return a.Index == b.Index && a.Term == b.Term && a.Type == b.Type &&
		bytes.Equal(a.Data, b.Data) && (a.Data == nil) == (b.Data == nil) &&
		bytes.Equal(a.Extensions, b.Extensions) && (a.Extensions == nil) == (b.Extensions == nil) &&
		a.AppendedAt.Equal(b.AppendedAt) && a.AppendedAt.IsZero() == b.AppendedAt.IsZero()
}

func randLog(rng *rand.Rand) *raft.Log {
	l := &raft.Log{Index: rng.Uint64(), Term: rng.Uint64(), Type: raft.LogType(rng.IntN(256))}
	switch rng.IntN(3) {
	case 1:
		l.Data = []byte{}
	case 2:
		l.Data = make([]byte, rng.IntN(2000))
		for i := range l.Data {
			l.Data[i] = byte(rng.Uint32())
		}
	}
	switch rng.IntN(3) {
	case 1:
		l.Extensions = []byte{}
	case 2:
		l.Extensions = []byte(strings.Repeat("x", rng.IntN(300)))
	}
	switch rng.IntN(3) {
	case 1:
		l.AppendedAt = time.Unix(rng.Int64N(1<<40)-1<<39, rng.Int64N(1e9))
	case 2:
		l.AppendedAt = time.Date(1, 1, 1, 0, 0, 0, 1, time.UTC) // one ns after the zero time
	}
	return l
}

func TestCodec_RoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 5000 {
		l := randLog(rng)
		b := appendLog(nil, l)
		if len(b) != encodedSize(l) {
			t.Fatalf("encodedSize %d, encoded %d", encodedSize(l), len(b))
		}
		var got raft.Log
		if err := decodeLog(b, l.Index, &got); err != nil {
			t.Fatal(err)
		}
		if !sameLog(l, &got) {
			t.Fatalf("round trip:\n%+v\n%+v", l, got)
		}
	}
}

// The bytes of one entry, fixed: a change of the encoding must be a new
// version, not a silent change of version 1.
func TestCodec_Golden(t *testing.T) {
	l := &raft.Log{Index: 0x0102, Term: 3, Type: raft.LogCommand, Data: []byte("hi"),
		AppendedAt: time.Unix(1700000000, 5)}
	const want = "0100030000000000000102000000000000000300000000" + "6553f100" + "00000005" + "026869" + "00"
	got := hex.EncodeToString(appendLog(nil, l))
	if got[:len(got)-8] != want {
		t.Fatalf("encoding of version 1 changed:\n got %s\nwant %s", got, want)
	}
}

// Every damaged form of an entry is ErrCorrupt, never a panic or another
// entry: each byte flipped, each truncation, trailing bytes, the wrong key.
func TestCodec_Damage(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for range 50 {
		l := randLog(rng)
		good := appendLog(nil, l)
		for i := range good {
			for _, x := range []byte{0x01, 0x80, 0xff} {
				b := bytes.Clone(good)
				b[i] ^= x
				var got raft.Log
				if err := decodeLog(b, l.Index, &got); !errors.Is(err, ErrCorrupt) {
					t.Fatalf("byte %d ^ %#x: %v", i, x, err)
				}
			}
		}
		for n := range len(good) {
			var got raft.Log
			if err := decodeLog(good[:n], l.Index, &got); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("truncated to %d of %d bytes: %v", n, len(good), err)
			}
		}
		var got raft.Log
		if err := decodeLog(append(bytes.Clone(good), 0), l.Index, &got); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("a trailing byte: %v", err)
		}
		if err := decodeLog(good, l.Index+1, &got); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "says index") {
			t.Fatalf("stored under another key: %v", err)
		}
	}
	b := appendLog(nil, &raft.Log{Index: 1})
	b[0] = 2
	var got raft.Log
	if err := decodeLog(b, 1, &got); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "version 2") {
		t.Fatalf("a newer version: %v", err)
	}
}

func FuzzDecodeLog(f *testing.F) {
	rng := rand.New(rand.NewPCG(5, 6))
	for range 20 {
		l := randLog(rng)
		f.Add(appendLog(nil, l), l.Index)
	}
	f.Fuzz(func(t *testing.T, b []byte, idx uint64) {
		var l raft.Log
		if err := decodeLog(b, idx, &l); err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error not ErrCorrupt: %v", err)
			}
			return
		}
		// Whatever decodes encodes back to the same bytes.
		if again := appendLog(nil, &l); !bytes.Equal(again, b) {
			t.Fatalf("decoded entry re-encodes differently")
		}
	})
}
