package broker

// Golden bytes of the broker's records (docs/FORMAT.md §5.6, "Examples").
//
// Each example below is one encoder's output for a fixed input, split into
// annotated fields. TestFormatGoldenBroker renders it as an annotated hex
// block and checks that the block is byte for byte both
// testdata/format/broker-<name>.hex and a block of docs/FORMAT.md, and that
// the decoders read the documented bytes back as the input.
// TestFormatGoldenBrokerStore checks that a store built by the public API
// holds exactly these values under the documented keys.
//
// After a deliberate format change: go test -run TestFormatGoldenBroker
// -update-broker-golden rewrites the .hex files; paste them into FORMAT.md
// (the test prints the expected block) and bump the format version.
//
// This file is self-contained (the encoders it calls are the only coupling)
// so that it can move with the broker code.

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"flag"
	"fmt"
	"github.com/kdb-project/kdb"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

var updateBrokerGolden = flag.Bool("update-broker-golden", false, "rewrite testdata/format/broker-*.hex")

const (
	brokerGoldenDoc = "../docs/FORMAT.md" // relative to the package directory
	brokerGoldenDir = "testdata/format"
	goldenHexWidth  = 8*3 + 1 // 8 bytes per line ("xx " each), then a space
)

// The scenario the examples come from (TestFormatGoldenBrokerStore replays
// it): queue "orders" (id 1) gets goldenMsg as seq 1; topic "events"
// (id 2) gets subscription "audit" (id 3), then a message e1 (seq 1);
// transaction "x1" is prepared with goldenTxOps.
var (
	goldenMsg = Message{ID: "m1", ProducerID: "p", ProducerSeq: 7,
		Properties: map[string]string{"b": "2", "a": "1"}, Body: []byte("hello")}
	goldenTxMsg = Message{ID: "m2", Body: []byte("b")}
	goldenTxOps = []txOp{
		{kind: txSend, dk: Queue, dest: "orders", msg: &goldenTxMsg},
		{kind: txAck, dk: Queue, dest: "orders", seqs: []uint64{1}},
		{kind: txAckSub, dk: Topic, dest: "events", sub: "audit", seqs: []uint64{1, 200}},
	}
	goldenMsgSize = uint32(len(encodeMessage(&goldenMsg))) // 21
)

// goldenPart is n bytes of an example and what they are.
type goldenPart struct {
	n    int
	note string
}

type brokerGolden struct {
	name   string // testdata/format/broker-<name>.hex; "broker-<name>:" opens its FORMAT.md block
	title  string
	tree   string // the index of namespace "b" that keeps it ("": a key or tree name, not a stored value)
	key    []byte
	enc    func() []byte
	parts  []goldenPart
	decode func(b []byte) error // reads the golden bytes back and compares with the input
}

func brokerGoldens() []brokerGolden {
	le := binary.LittleEndian
	ordersKey := destKey(Queue, "orders")
	subKey := append(binary.BigEndian.AppendUint64(nil, 2), "audit"...)
	want := func(what string, got, want any) error {
		if !reflect.DeepEqual(got, want) {
			return fmt.Errorf("%s: decoded %#v, want %#v", what, got, want)
		}
		return nil
	}
	return []brokerGolden{
		{
			name: "tree-name", title: `the name of tree b/m/<id> for destination id 1 (b/h/, b/x/, b/p/, b/q/ alike)`,
			enc:   func() []byte { return []byte(Namespace + "/" + idTree(msgPrefix, 1)) },
			parts: []goldenPart{{4, `"b/m/"`}, {8, "id 1, u64 big-endian"}},
		},
		{
			name: "seq-key", title: "the key of seq 1 in b/m/<id>, b/h/<id>, b/q/<id>",
			enc:   func() []byte { return seqKey(1) },
			parts: []goldenPart{{8, "seq 1, u64 big-endian"}},
		},
		{
			name: "dest-key", title: `a key of b/dests: queue "orders"`,
			enc:   func() []byte { return destKey(Queue, "orders") },
			parts: []goldenPart{{1, "kind 1 (queue)"}, {6, `name "orders"`}},
		},
		{
			name: "dest", title: `its value (destination record): id 1, nextSeq 2, 1 message of 21 bytes`,
			tree: destsTree, key: ordersKey,
			enc: func() []byte {
				return (&destRec{id: 1, nextSeq: 2, count: 1, nbytes: uint64(goldenMsgSize)}).encode()
			},
			parts: []goldenPart{{8, "id 1"}, {8, "nextSeq 2"}, {8, "count 1"}, {8, "bytes 21"}},
			decode: func(b []byte) error {
				d, err := decodeDestRec(ordersKey, b)
				if err != nil {
					return err
				}
				return want("destination", []uint64{d.id, d.nextSeq, d.count, d.nbytes}, []uint64{1, 2, 1, uint64(goldenMsgSize)})
			},
		},
		{
			name: "ctr", title: `b/ctr, key "ids": the next id is 4`,
			tree: ctrTree, key: []byte("ids"),
			enc:    func() []byte { return u64(4) },
			parts:  []goldenPart{{8, "4"}},
			decode: func(b []byte) error { return want("ids", le.Uint64(b), uint64(4)) },
		},
		{
			name: "sub-key", title: `a key of b/subs: subscription "audit" of topic id 2`,
			enc:   func() []byte { return subKey },
			parts: []goldenPart{{8, "topic id 2, u64 big-endian"}, {5, `name "audit"`}},
		},
		{
			name: "sub", title: `its value: subscription id 3, start seq 1`,
			tree: subsTree, key: subKey,
			// Subscribe builds the value inline, the same way.
			enc:    func() []byte { return le.AppendUint64(u64(3), 1) },
			parts:  []goldenPart{{8, "subscription id 3"}, {8, "start seq 1"}},
			decode: func(b []byte) error { return want("sub", []uint64{le.Uint64(b), le.Uint64(b[8:])}, []uint64{3, 1}) },
		},
		{
			name: "message", title: `b/m/<1>, key seq 1: message m1 (producer "p" seq 7, properties b=2 a=1, body "hello")`,
			tree: idTree(msgPrefix, 1), key: seqKey(1),
			enc: func() []byte { return encodeMessage(&goldenMsg) },
			parts: []goldenPart{{1, "version 1"}, {3, `ID: length 2, "m1"`}, {2, `producer ID: length 1, "p"`},
				{1, "producer seq 7"}, {1, "2 properties"}, {4, `"a" = "1" (key order)`}, {4, `"b" = "2"`},
				{5, `body "hello" (the rest)`}},
			decode: func(b []byte) error {
				m, err := decodeMessage(b)
				if err != nil {
					return err
				}
				return want("message", m, goldenMsg)
			},
		},
		{
			name: "hdr", title: `b/h/<1>, key seq 1: its header: 1 reference, 21 bytes, ID "m1"`,
			tree: idTree(hdrPrefix, 1), key: seqKey(1),
			enc:   func() []byte { return encodeHdr(1, goldenMsgSize, "m1") },
			parts: []goldenPart{{4, "refs 1, u32"}, {4, "size 21, u32"}, {2, `ID "m1" (the rest)`}},
			decode: func(b []byte) error {
				refs, size, id, err := decodeHdr(b)
				if err != nil {
					return err
				}
				return want("header", []any{refs, size, string(id)}, []any{uint32(1), goldenMsgSize, "m1"})
			},
		},
		{
			name: "msgid", title: `b/x/<1>, key "m1": seq 1`,
			tree: idTree(idPrefix, 1), key: []byte("m1"),
			enc:    func() []byte { return u64(1) },
			parts:  []goldenPart{{8, "seq 1"}},
			decode: func(b []byte) error { return want("seq", le.Uint64(b), uint64(1)) },
		},
		{
			name: "producer", title: `b/p/<1>, key "p": producer sequence 7`,
			tree: idTree(prodPrefix, 1), key: []byte("p"),
			enc:    func() []byte { return u64(7) },
			parts:  []goldenPart{{8, "7"}},
			decode: func(b []byte) error { return want("producer seq", le.Uint64(b), uint64(7)) },
		},
		{
			name: "tx", title: `b/tx, key "x1": send m2 (body "b") to queue orders, ack seq 1 of orders, ack seqs 1 and 200 of events for audit`,
			tree: txTree, key: []byte("x1"),
			enc: func() []byte { return encodeTx(goldenTxOps) },
			parts: []goldenPart{{1, "version 1"}, {1, "3 ops"},
				{1, "op 1: kind 1 (send)"}, {1, "destination kind 1 (queue)"}, {7, `destination: length 6, "orders"`},
				{1, "subscription: length 0"}, {1, "message: length 8"},
				{1, "  version 1"}, {3, `  ID: length 2, "m2"`}, {1, "  producer ID: length 0"},
				{1, "  producer seq 0"}, {1, "  0 properties"}, {1, `  body "b"`},
				{1, "op 2: kind 2 (ack)"}, {1, "destination kind 1 (queue)"}, {7, `destination: length 6, "orders"`},
				{1, "subscription: length 0"}, {1, "1 seq"}, {1, "seq 1"},
				{1, "op 3: kind 3 (ack for a subscription)"}, {1, "destination kind 2 (topic)"},
				{7, `destination: length 6, "events"`}, {6, `subscription: length 5, "audit"`},
				{1, "2 seqs"}, {1, "seq 1"}, {2, "seq 200 (uvarint: two bytes)"}},
			decode: func(b []byte) error {
				ops, err := decodeTx(b)
				if err != nil {
					return err
				}
				return want("transaction", ops, goldenTxOps)
			},
		},
	}
}

// renderGolden is the annotated hex block of b: a title line, then each
// part's bytes, at most 8 a line, its note on its first line.
func renderGolden(g brokerGolden, b []byte) (string, error) {
	var sb strings.Builder
	fmt.Fprintf(&sb, "broker-%s: %s\n", g.name, g.title)
	off := 0
	for _, p := range g.parts {
		if off+p.n > len(b) {
			return "", fmt.Errorf("broker-%s: parts cover %d bytes or more, the encoding has %d", g.name, off+p.n, len(b))
		}
		for i := 0; i < p.n; i += 8 {
			chunk := b[off+i : off+min(i+8, p.n)]
			h := spacedHex(chunk)
			note := ""
			if i == 0 {
				note = p.note
			}
			sb.WriteString(strings.TrimRight(fmt.Sprintf("%-*s%s", goldenHexWidth, h, note), " "))
			sb.WriteByte('\n')
		}
		off += p.n
	}
	if off != len(b) {
		return "", fmt.Errorf("broker-%s: parts cover %d bytes, the encoding has %d", g.name, off, len(b))
	}
	return sb.String(), nil
}

func spacedHex(b []byte) string {
	s := make([]string, len(b))
	for i, c := range b {
		s[i] = fmt.Sprintf("%02x", c)
	}
	return strings.Join(s, " ")
}

// parseGolden reads the bytes back from a block (the hex column of every
// line after the title).
func parseGolden(block string) ([]byte, error) {
	lines := strings.Split(strings.TrimSuffix(block, "\n"), "\n")
	var out []byte
	for _, l := range lines[1:] {
		col := l
		if len(col) > goldenHexWidth {
			col = col[:goldenHexWidth]
		}
		b, err := hex.DecodeString(strings.ReplaceAll(strings.TrimSpace(col), " ", ""))
		if err != nil {
			return nil, fmt.Errorf("line %q: %w", l, err)
		}
		out = append(out, b...)
	}
	return out, nil
}

func TestFormatGoldenBroker(t *testing.T) {
	doc, err := os.ReadFile(brokerGoldenDoc)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, g := range brokerGoldens() {
		t.Run(g.name, func(t *testing.T) {
			if names[g.name] {
				t.Fatalf("two examples named %q", g.name)
			}
			names[g.name] = true
			got, err := renderGolden(g, g.enc())
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(brokerGoldenDir, "broker-"+g.name+".hex")
			if *updateBrokerGolden {
				if err := os.MkdirAll(brokerGoldenDir, 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			file, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (regenerate with -update-broker-golden)", err)
			}
			if string(file) != got {
				t.Errorf("encoding differs from %s:\nencoder:\n%s\nfile:\n%s", path, got, file)
			}
			if !bytes.Contains(doc, []byte("```\n"+string(file)+"```\n")) {
				t.Errorf("%s lacks this example as a code block (or it differs):\n```\n%s```", brokerGoldenDoc, file)
			}
			// The documented bytes, read back by the decoder, are the input.
			b, err := parseGolden(string(file))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(b, g.enc()) {
				t.Errorf("hex column of %s reads %x, the encoder gives %x", path, b, g.enc())
			}
			if g.decode != nil {
				if err := g.decode(b); err != nil {
					t.Error(err)
				}
			}
		})
	}
	// Every broker-*.hex file is an example (none left behind by a rename).
	files, _ := filepath.Glob(filepath.Join(brokerGoldenDir, "broker-*.hex"))
	for _, f := range files {
		n := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(f), "broker-"), ".hex")
		if !names[n] {
			t.Errorf("%s belongs to no example", f)
		}
	}
}

// TestFormatGoldenBrokerStore builds the scenario through the public API
// and reads every stored example back from its tree: the store writes
// exactly the documented bytes.
func TestFormatGoldenBrokerStore(t *testing.T) {
	kv, err := kdb.Open(t.TempDir(), &kdb.Options{CheckpointInterval: -1, Sync: kdb.UnsafeSyncNever})
	if err != nil {
		t.Fatal(err)
	}
	defer kv.Close()
	db, err := Open(kv)
	if err != nil {
		t.Fatal(err)
	}
	m := goldenMsg
	if _, err := db.Send(Queue, "orders", &m); err != nil {
		t.Fatal(err)
	}
	if err := db.Subscribe("events", "audit"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Send(Topic, "events", &Message{ID: "e1", Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	// The prepared transaction acks a seq 200 that events does not have
	// yet: send up to it first, so that Prepare's dry run accepts it.
	for i := 2; i <= 200; i++ {
		if _, err := db.Send(Topic, "events", &Message{ID: fmt.Sprintf("e%d", i), Body: []byte("x")}); err != nil {
			t.Fatal(err)
		}
	}
	tx := db.BeginTx()
	for _, o := range goldenTxOps {
		switch o.kind {
		case txSend:
			m := *o.msg
			err = tx.Send(o.dk, o.dest, &m)
		case txAck:
			err = tx.Ack(o.dk, o.dest, o.seqs...)
		case txAckSub:
			err = tx.AckSub(o.dest, o.sub, o.seqs...)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Prepare("x1"); err != nil {
		t.Fatal(err)
	}
	stored := 0
	err = db.view(func(s snap) error {
		for _, g := range brokerGoldens() {
			if g.tree == "" {
				continue
			}
			stored++
			v, ok, err := s.get(g.tree, g.key)
			if err != nil {
				return err
			}
			if !ok {
				t.Errorf("broker-%s: nothing stored at %q %x", g.name, g.tree, g.key)
			} else if !bytes.Equal(v, g.enc()) {
				t.Errorf("broker-%s: stored %x, documented %x", g.name, v, g.enc())
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if stored < 8 {
		t.Errorf("only %d examples name where they are stored", stored)
	}
}
