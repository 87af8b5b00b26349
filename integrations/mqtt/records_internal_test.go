package kdbmqtt

import (
	"errors"
	"reflect"
	"testing"

	"github.com/mochi-mqtt/server/v2/hooks/storage"
	"github.com/mochi-mqtt/server/v2/packets"
)

func fullMessage() storage.Message {
	return storage.Message{
		T:           storage.InflightKey,
		ID:          "id-1",
		Client:      "client-ü",
		Origin:      "origin",
		TopicName:   "a/b/c",
		Payload:     []byte("payload \x00\xff"),
		FixedHeader: packets.FixedHeader{Remaining: 300, Type: packets.Publish, Qos: 2, Dup: true, Retain: true},
		Created:     1796158703,
		Sent:        -5,
		PacketID:    0xfffe,
		Properties: storage.MessageProperties{
			CorrelationData:        []byte{1, 2, 3},
			SubscriptionIdentifier: []int{1, 268435455},
			User:                   []packets.UserProperty{{Key: "k", Val: "v"}, {Key: "", Val: "empty key"}},
			ContentType:            "text/plain",
			ResponseTopic:          "reply/to",
			MessageExpiryInterval:  1<<32 - 1,
			TopicAlias:             7,
			PayloadFormat:          1,
			PayloadFormatFlag:      true,
		},
	}
}

// The binary encoding reads back every field; the JSON of earlier
// versions is still read.
func TestMessageRecord_RoundTrip(t *testing.T) {
	for _, m := range []storage.Message{fullMessage(), {TopicName: "t"}} {
		got, err := decodeMessage(encodeMessage(&m), "test")
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, m) {
			t.Errorf("round trip:\n got %+v\nwant %+v", got, m)
		}
		j, err := m.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		if got, err := decodeMessage(j, "test"); err != nil || got.TopicName != m.TopicName || string(got.Payload) != string(m.Payload) {
			t.Errorf("JSON record: %+v, %v", got, err)
		}
	}
}

// Every truncation, and bytes after the end, is a malformed record (an
// error wrapping errMalformed), never a panic.
func TestMessageRecord_Damaged(t *testing.T) {
	m := fullMessage()
	b := encodeMessage(&m)
	for n := 0; n < len(b); n++ {
		if _, err := decodeMessage(b[:n], "test"); !errors.Is(err, errMalformed) {
			t.Fatalf("%d of %d bytes: %v, want errMalformed", n, len(b), err)
		}
	}
	if _, err := decodeMessage(append(b[:len(b):len(b)], 0), "test"); !errors.Is(err, errMalformed) {
		t.Fatalf("a trailing byte: %v, want errMalformed", err)
	}
	if _, err := decodeMessage([]byte{0x7f, 1, 2}, "test"); !errors.Is(err, errMalformed) {
		t.Fatalf("unknown format: %v, want errMalformed", err)
	}
	// A count that claims more elements than the record has bytes.
	huge := []byte{msgFormat, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f}
	if _, err := decodeMessage(huge, "test"); !errors.Is(err, errMalformed) {
		t.Fatalf("huge count: %v, want errMalformed", err)
	}
}

// FuzzDecodeMessage: any bytes decode to a message or errMalformed.
func FuzzDecodeMessage(f *testing.F) {
	m := fullMessage()
	f.Add(encodeMessage(&m))
	e := storage.Message{}
	f.Add(encodeMessage(&e))
	j, _ := m.MarshalBinary()
	f.Add(j)
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := decodeMessage(b, "fuzz")
		if err != nil {
			if !errors.Is(err, errMalformed) {
				t.Fatalf("error not errMalformed: %v", err)
			}
			return
		}
		if len(b) > 0 && b[0] == msgFormat {
			again, err := decodeMessage(encodeMessage(&got), "fuzz")
			if err != nil || !reflect.DeepEqual(again, got) {
				t.Fatalf("re-encoding a decoded record: %v\n got %+v\nwant %+v", err, again, got)
			}
		}
	})
}
