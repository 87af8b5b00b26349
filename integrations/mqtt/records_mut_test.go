package kdbmqtt

// Tests added by mutation testing of the hook's records (records.go):
// each guards a rule that a deliberate breakage of the code changed
// without any other test failing.

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

// TestMut_KeyPartsAtTheirBound guards part's bound (records.go, "len(s) <=
// max"): a client ID of maxClientPart bytes, and a filter or topic of
// maxNamePart bytes, are their own key parts; one byte more is replaced by
// its hash. The keys are the on-disk format: a store written with one
// rule and read with the other would not find these records.
func TestMut_KeyPartsAtTheirBound(t *testing.T) {
	client := strings.Repeat("c", maxClientPart)
	if k := clientKey(client); string(k) != client {
		t.Errorf("key of a %d-byte client ID: %q, want the ID", len(client), k)
	}
	topic := strings.Repeat("t", maxNamePart)
	if k := retainedKey(topic); string(k) != topic {
		t.Errorf("key of a %d-byte topic: %q, want the topic", len(topic), k)
	}
	if k := subKey(client, topic); !bytes.Equal(k, []byte(client+"\x00"+topic)) {
		t.Errorf("subscription key at both bounds: %q", k)
	}
	for _, long := range []string{client + "c", "\x01short"} {
		k := clientKey(long)
		if len(k) != 65 || k[0] != 1 {
			t.Errorf("key of client ID %.10q... (%d bytes): %q, want 0x01 and 64 hex digits", long, len(long), k)
		}
	}
	if k := retainedKey(topic + "t"); len(k) != 65 || k[0] != 1 {
		t.Errorf("key of a %d-byte topic: %q, want 0x01 and 64 hex digits", len(topic)+1, k)
	}
}

// TestMut_KeyListRefusesAnEmptyKey guards decodeKeyList's check of each
// key (records.go, "len(k) == 0"): a fan-out record naming the empty key
// is malformed (no inflight record has it: load would delete what is not
// a copy of the interrupted fan-out).
func TestMut_KeyListRefusesAnEmptyKey(t *testing.T) {
	v := encodeKeyList([][]byte{inflightKey("a", 1), {}})
	if keys, err := decodeKeyList(v); !errors.Is(err, errMalformed) {
		t.Fatalf("a fan-out record with an empty key: %q, %v; want errMalformed", keys, err)
	}
}
