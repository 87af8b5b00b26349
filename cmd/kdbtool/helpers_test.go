package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/broker"
)

// runTool runs kdbtool in-process and returns its exit code and outputs.
func runTool(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(args, &out, &errb)
	return code, out.String(), errb.String()
}

// runJSON runs kdbtool with --json and decodes its stdout.
func runJSON(t *testing.T, args ...string) (int, map[string]any) {
	t.Helper()
	code, out, errs := runTool(t, args...)
	var m map[string]any
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		t.Fatalf("kdbtool %v: exit %d, stdout not JSON: %v\n%s\nstderr: %s", args, code, err, out, errs)
	}
	return code, m
}

// jget walks a decoded JSON document by dotted path.
func jget(t *testing.T, m map[string]any, path string) any {
	t.Helper()
	var v any = m
	for _, p := range strings.Split(path, ".") {
		mm, ok := v.(map[string]any)
		if !ok {
			t.Fatalf("%s: %v is not an object", path, v)
		}
		v, ok = mm[p]
		if !ok {
			t.Fatalf("%s: no field %q in %v", path, p, mm)
		}
	}
	return v
}

const testSegmentSize = 1 << 20

// makeStore builds a closed store in a temp dir: index "users" with n
// keys (every third value large, so that it lives in the journal), a queue
// and a topic with a subscription.
func makeStore(t *testing.T, n int) string {
	t.Helper()
	dir := t.TempDir()
	db, err := kdb.Open(dir, &kdb.Options{SegmentSize: testSegmentSize, CheckpointInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	br, err := broker.Open(db)
	if err != nil {
		t.Fatal(err)
	}
	b := kdb.NewBatch()
	for i := 0; i < n; i++ {
		v := []byte(fmt.Sprintf("value-%d", i))
		if i%3 == 0 {
			v = bytes.Repeat(v, 100)
		}
		b.Put("users", []byte(fmt.Sprintf("user-%05d", i)), v)
		if b.Len() == 100 {
			if err := db.Write(b); err != nil {
				t.Fatal(err)
			}
			b.Reset()
		}
	}
	if err := db.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := br.Subscribe("events", "audit"); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		if _, err := br.Send(broker.Queue, "orders", &broker.Message{ID: fmt.Sprintf("o%d", i), Body: []byte("order body")}); err != nil {
			t.Fatal(err)
		}
		if _, err := br.Send(broker.Topic, "events", &broker.Message{ID: fmt.Sprintf("e%d", i), Body: []byte("event")}); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	return dir
}

// snapshotFiles returns every regular file's bytes in dir.
func snapshotFiles(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	m := map[string][]byte{}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if !e.Type().IsRegular() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		m[e.Name()] = b
	}
	return m
}

func requireSameFiles(t *testing.T, before, after map[string][]byte) {
	t.Helper()
	for n, b := range before {
		if a, ok := after[n]; !ok || !bytes.Equal(a, b) {
			t.Errorf("%s changed", n)
		}
	}
	for n := range after {
		if _, ok := before[n]; !ok {
			t.Errorf("%s created", n)
		}
	}
}
