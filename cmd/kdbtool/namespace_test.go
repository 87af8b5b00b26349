package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kdb-project/kdb"
)

// TestInspectDump_Namespaces: an integration's indexes live in a kdb
// namespace (the MQTT hook's "mq", raftkdb's "raft"); inspect lists them
// with their namespace and dump --ns lists their keys. They were
// invisible to the operator ("indexes: 0", dump: not found).
func TestInspectDump_Namespaces(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "db")
	db, err := kdb.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Put("users", []byte("u1"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	mq, err := db.Namespace("mq")
	if err != nil {
		t.Fatal(err)
	}
	b := mq.NewBatch()
	b.Put("sessions", []byte("client-1"), []byte("s1"))
	b.Put("sessions", []byte("client-2"), []byte("s2"))
	if err := db.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	code, out, errs := runTool(t, "inspect", dir)
	if code != exitOK || !strings.Contains(out, "indexes: 2") || !strings.Contains(out, "sessions (namespace mq): 2 keys") {
		t.Fatalf("inspect: exit %d\n%s%s", code, out, errs)
	}
	code, out, errs = runTool(t, "inspect", "--json", dir)
	var in struct {
		Store struct {
			Indexes []struct {
				Namespace, Name string
				Keys            uint64
			}
		}
	}
	if err := json.Unmarshal([]byte(out), &in); code != exitOK || err != nil || len(in.Store.Indexes) != 2 ||
		in.Store.Indexes[1].Namespace != "mq" || in.Store.Indexes[1].Name != "sessions" || in.Store.Indexes[1].Keys != 2 {
		t.Fatalf("inspect --json: exit %d, %v, %+v\n%s", code, err, in.Store.Indexes, errs)
	}
	code, out, errs = runTool(t, "dump", "--ns", "mq", "--index", "sessions", dir)
	if code != exitOK || !strings.Contains(out, `"client-1"`) || !strings.Contains(out, `"client-2"`) {
		t.Fatalf("dump --ns mq: exit %d\n%s%s", code, out, errs)
	}
	if code, out, errs := runTool(t, "dump", "--index", "sessions", dir); code != exitProblems {
		t.Errorf("dump of the index without its namespace: exit %d, want %d (not found)\n%s%s", code, exitProblems, out, errs)
	}
	for _, args := range [][]string{{"--ns", "Bad", "--index", "sessions"}, {"--ns", "u", "--index", "users"}, {"--ns", "mq", "--queue", "q"}} {
		if code, _, errs := runTool(t, append(append([]string{"dump"}, args...), dir)...); code != exitUsage {
			t.Errorf("dump %v: exit %d, want %d\n%s", args, code, exitUsage, errs)
		}
	}
}
