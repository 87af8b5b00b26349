package raftkdb

// Tests added by mutation testing of the entry codec: TestCodec_Damage
// flips and cuts bytes of an encoded entry, which the checksum catches
// before any check of the structure runs, so breaking those checks failed
// no test. These entries carry a valid checksum over a body a correct
// writer never makes: each must still be ErrCorrupt.

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// reseal returns an encoded entry body (without its checksum) with a
// valid checksum appended.
func reseal(body []byte) []byte {
	return binary.BigEndian.AppendUint32(body, crc32.Checksum(body, castagnoli))
}

// header is an entry's header for index 7, term 1, with flags.
func header(flags byte) []byte {
	b := []byte{logVersion, byte(raft.LogCommand), flags}
	b = binary.BigEndian.AppendUint64(b, 7)
	return binary.BigEndian.AppendUint64(b, 1)
}

func TestMut_CodecRefusesMalformedBodiesWithAValidChecksum(t *testing.T) {
	// The well-formed entry the cases below break: Data "abc", no
	// Extensions, no AppendedAt.
	good := append(header(flagData), 3, 'a', 'b', 'c', 0)
	var l raft.Log
	if err := decodeLog(reseal(good), 7, &l); err != nil || string(l.Data) != "abc" {
		t.Fatalf("the well-formed entry: %v, %q", err, l.Data)
	}
	appended := func(nsec uint32) []byte {
		b := binary.BigEndian.AppendUint64(header(flagAppendedAt), uint64(time.Now().Unix()))
		return append(binary.BigEndian.AppendUint32(b, nsec), 0, 0)
	}
	if err := decodeLog(reseal(appended(999_999_999)), 7, &l); err != nil {
		t.Fatalf("AppendedAt with the largest nanoseconds: %v", err)
	}
	for _, c := range []struct {
		name string
		body []byte
	}{
		// codec.go "nsec >= 1e9": a second's worth of nanoseconds is
		// not a valid AppendedAt (time.Unix would carry it into the
		// seconds, so it would not encode back to the same bytes).
		{"AppendedAt nanoseconds of 1e9", appended(1e9)},
		// codec.go "len(p) != 0": bytes after the last field.
		{"a byte after the last field", append(append([]byte(nil), good...), 0)},
		// codec.go field, "length %d for an absent field": Data
		// flagged absent (nil) but given a length of 1 and a byte (0,
		// which also reads as the empty Extensions).
		{"bytes for an absent field", append(header(0), 1, 0)},
		// codec.go "flags&^flagsKnown != 0": a flag this build does
		// not know (a newer writer's field it would drop).
		{"an unknown flag", append(header(flagData|1<<5), 3, 'a', 'b', 'c', 0)},
		// codec.go field, "k != uvarintLen(n)": Data's length 3 in two
		// bytes (0x83 0x00), a varint no writer makes: the same entry
		// would have two encodings.
		{"a length as a non-minimal varint", append(header(flagData), 0x83, 0, 'a', 'b', 'c', 0)},
		// codec.go "AppendedAt flagged but the zero time": the flag
		// says "not the zero time" and the 12 bytes are exactly it
		// (appendLog never sets the flag for the zero time).
		{"AppendedAt flagged with the zero time", append(binary.BigEndian.AppendUint32(
			binary.BigEndian.AppendUint64(header(flagAppendedAt), uint64(time.Time{}.Unix())), 0), 0, 0)},
	} {
		var got raft.Log
		if err := decodeLog(reseal(c.body), 7, &got); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: %v (%+v), want ErrCorrupt", c.name, err, got)
		}
	}
}
