package main

import (
	"bytes"
	"fmt"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kdb-project/kdb"
)

// TestNode_PutKeyTooLongRefusedBeforeRaft: a key kdb cannot store is
// refused by the HTTP handler, not committed to every node's raft log and
// then refused by each FSM.
func TestNode_PutKeyTooLongRefusedBeforeRaft(t *testing.T) {
	n := &node{}
	rec := httptest.NewRecorder()
	func() {
		defer func() {
			if r := recover(); r != nil { // a node without raft: the key was taken
				t.Errorf("PUT with a %d-byte key went on to raft: %v", kdb.MaxKeySize+1, r)
			}
		}()
		key := strings.Repeat("k", kdb.MaxKeySize+1)
		n.ServeHTTP(rec, httptest.NewRequest(http.MethodPut, "/kv/"+key, bytes.NewReader([]byte("v"))))
	}()
	if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), "key of") {
		t.Errorf("PUT with a key over MaxKeySize: %d %q, want 400", rec.Code, rec.Body)
	}
}

// TestNode_FilesNotReadableByOthers: under the usual umask (022) a node's
// raft snapshots (the whole FSM exported, every value) were created 0644 in
// 0755 directories. Nothing a node writes may be readable by other users.
func TestNode_FilesNotReadableByOthers(t *testing.T) {
	old := syscall.Umask(0o022) // what the nodes inherit
	defer syscall.Umask(old)
	c := newCluster(t, 1, "-snapshot-threshold", "20", "-snapshot-interval", "200ms", "-trailing-logs", "5")
	l := c.leader(15 * time.Second)
	for i := range 60 {
		if !c.put(l, fmt.Sprintf("k%d", i), []byte(fmt.Sprintf("secret-%d", i))) {
			t.Fatalf("put %d not acknowledged; failures %v", i, c.failures())
		}
	}
	dir := c.nodeDir(0)
	var snaps []string
	for deadline := time.Now().Add(20 * time.Second); len(snaps) == 0; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no snapshot written under %s: %s", dir, c.logTail(0))
		}
		snaps, _ = filepath.Glob(filepath.Join(dir, "snapshots", "*", "state.bin"))
	}
	checked := 0
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if os.IsNotExist(err) { // a snapshot being replaced
				return nil
			}
			return err
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		checked++
		if info.Mode().Perm()&0o007 != 0 {
			t.Errorf("%s: mode %v, open to other users", p, info.Mode().Perm())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 5 {
		t.Fatalf("only %d entries under %s", checked, dir)
	}
}
