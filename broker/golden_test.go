package broker_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"testing"

	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/broker"
)

// The golden stores were written by the broker when it still lived in the
// root package (testdata/golden-v1/README.md); the on-disk trees did not
// change when it moved, so today's code must read every message back.

type goldenMsg struct {
	Seq   uint64            `json:"seq"`
	ID    string            `json:"id"`
	Props map[string]string `json:"props,omitempty"`
	Body  string            `json:"body"`
	Len   int               `json:"len"`
}

type goldenDest struct {
	Kind     string                 `json:"kind"`
	Name     string                 `json:"name"`
	Count    uint64                 `json:"count"`
	Bytes    uint64                 `json:"bytes"`
	NextSeq  uint64                 `json:"next_seq"`
	Messages []goldenMsg            `json:"messages"`
	Subs     map[string][]goldenMsg `json:"subs,omitempty"`
}

type golden struct {
	Dests    []goldenDest      `json:"destinations"`
	Prepared []string          `json:"prepared"`
	KV       map[string]string `json:"kv"`
}

// copyDir copies a golden store into a temporary directory (opening it
// writes: recovery, checkpoints).
func copyDir(t *testing.T, src string) string {
	t.Helper()
	dst := t.TempDir()
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

func readGolden(t *testing.T, b *broker.Broker) golden {
	t.Helper()
	var g golden
	infos, err := b.Destinations()
	if err != nil {
		t.Fatal(err)
	}
	conv := func(ms []broker.Message) []goldenMsg {
		var r []goldenMsg
		for _, m := range ms {
			r = append(r, goldenMsg{Seq: m.Seq, ID: m.ID, Props: m.Properties, Body: string(m.Body), Len: len(m.Body)})
		}
		return r
	}
	for _, in := range infos {
		d := goldenDest{Kind: in.Kind.String(), Name: in.Name, Count: in.Count, Bytes: in.Bytes, NextSeq: in.NextSeq}
		msgs, err := b.Read(in.Kind, in.Name, 0, 100000)
		if err != nil {
			t.Fatal(err)
		}
		d.Messages = conv(msgs)
		if in.Kind == broker.Topic {
			subs, err := b.Subscriptions(in.Name)
			if err != nil {
				t.Fatal(err)
			}
			d.Subs = map[string][]goldenMsg{}
			for _, s := range subs {
				ms, err := b.ReadSub(in.Name, s.Name, 0, 100000)
				if err != nil {
					t.Fatal(err)
				}
				if uint64(len(ms)) != s.Pending {
					t.Errorf("%s/%s: %d pending, read %d", in.Name, s.Name, s.Pending, len(ms))
				}
				d.Subs[s.Name] = conv(ms)
			}
		}
		g.Dests = append(g.Dests, d)
	}
	if g.Prepared, err = b.Prepared(); err != nil {
		t.Fatal(err)
	}
	sort.Strings(g.Prepared)
	g.KV = map[string]string{}
	for _, k := range []string{"alice", "bob", "carol"} {
		v, err := b.DB().Get("users", []byte(k))
		if err != nil {
			t.Fatal(err)
		}
		g.KV[k] = string(v)
	}
	return g
}

func TestGolden_StoreOfTheRootLayoutOpens(t *testing.T) {
	raw, err := os.ReadFile("testdata/golden-v1/expect.json")
	if err != nil {
		t.Fatal(err)
	}
	var want golden
	if err := json.Unmarshal(raw, &want); err != nil {
		t.Fatal(err)
	}
	if len(want.Dests) < 5 || len(want.Prepared) != 1 {
		t.Fatalf("expect.json holds %d destinations and %d prepared transactions: not the golden file", len(want.Dests), len(want.Prepared))
	}
	for _, name := range []string{"closed", "crashed"} {
		t.Run(name, func(t *testing.T) {
			want := want // round 0 moves it on
			dir := copyDir(t, filepath.Join("testdata/golden-v1", name))
			for round := 0; round < 2; round++ { // as found, then after a reopen
				db, err := kdb.Open(dir, nil)
				if err != nil {
					t.Fatal(err)
				}
				b, err := broker.Open(db)
				if err != nil {
					t.Fatal(err)
				}
				got := readGolden(t, b)
				if !reflect.DeepEqual(got, want) {
					gj, _ := json.Marshal(got)
					t.Logf("got: %.2000s", gj)
					t.Fatalf("round %d: the store reads back differently from what the old layout read (%d destinations, want %d)", round, len(got.Dests), len(want.Dests))
				}
				if _, err := db.Check(); err != nil {
					t.Fatal(err)
				}
				if err := b.Check(); err != nil {
					t.Fatal(err)
				}
				if round == 0 {
					// The new code writes to the old store and reads it.
					if err := b.CommitPrepared("xid-42"); err != nil {
						t.Fatal(err)
					}
					m, err := b.GetMessage(broker.Queue, "tx.q", "tx-3")
					if err != nil || string(m.Body) != "three" {
						t.Fatalf("prepared send after commit: %v %v", m, err)
					}
					want = readGolden(t, b)
				}
				if err := db.Close(); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}
