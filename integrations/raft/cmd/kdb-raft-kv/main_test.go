package main

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/kdb-project/kdb/integrations/raft/kvfsm"
)

// TestNode_PutOverOneMiBRefused: a value over 1 MiB is refused with 413,
// not cut to 1 MiB and stored; an empty one is 400. (Neither reaches raft.)
func TestNode_PutOverOneMiBRefused(t *testing.T) {
	n := &node{}
	for _, tc := range []struct {
		size int
		code int
	}{{maxValue + 1, http.StatusRequestEntityTooLarge}, {2 << 20, http.StatusRequestEntityTooLarge}, {0, http.StatusBadRequest}} {
		rec := httptest.NewRecorder()
		func() {
			defer func() {
				if r := recover(); r != nil { // a node without raft: the value was taken
					t.Errorf("PUT of %d bytes went on to raft: %v", tc.size, r)
				}
			}()
			n.ServeHTTP(rec, httptest.NewRequest(http.MethodPut, "/kv/big", bytes.NewReader(make([]byte, tc.size))))
		}()
		if rec.Code != tc.code {
			t.Errorf("PUT of %d bytes: %d %q, want %d", tc.size, rec.Code, rec.Body, tc.code)
		}
	}
}

// TestNode_RestartWithSnapshotAheadOfFSM rebuilds on one node the state a
// follower is left in when it is killed after raft saved a snapshot a
// leader installed and before the FSM restored it: the newest snapshot is
// ahead of the FSM and of the log, which raft (NoSnapshotRestoreOnStart)
// takes as applied. The node must restore it at start, not go on applying
// after it with the writes up to it missing.
func TestNode_RestartWithSnapshotAheadOfFSM(t *testing.T) {
	ports := freePorts(t, 2)
	peers := []peer{{"n1", fmt.Sprintf("127.0.0.1:%d", ports[0]), fmt.Sprintf("127.0.0.1:%d", ports[1])}}
	dir := t.TempDir()
	cfg := nodeConfig{dir: dir, store: "kdb", logLevel: "error", threshold: 1 << 20, interval: time.Hour,
		trailing: 1 << 20, fast: true}
	key := func(i int) []byte { return fmt.Appendf(nil, "k%02d", i) }
	session := func(from, to int, snapshot bool) *node {
		t.Helper()
		n := &node{id: "n1", peers: peers}
		if err := n.boot(cfg); err != nil {
			t.Fatal(errors.Join(err, n.close()))
		}
		for deadline := time.Now().Add(10 * time.Second); n.r.State() != raft.Leader; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				n.close()
				t.Fatal("no leader")
			}
		}
		for i := from; i <= to; i++ {
			if err := n.r.Apply(kvfsm.EncodePut(key(i), key(i)), 5*time.Second).Error(); err != nil {
				n.close()
				t.Fatal(err)
			}
		}
		if snapshot {
			if err := n.r.Snapshot().Error(); err != nil {
				n.close()
				t.Fatal(err)
			}
		}
		return n
	}
	closeNode := func(n *node) {
		t.Helper()
		if err := n.close(); err != nil {
			t.Fatal(err)
		}
	}
	closeNode(session(1, 10, false))
	// The store as it was: the FSM and the raft log at k10.
	old := filepath.Join(dir, "kdb.old")
	if err := os.CopyFS(old, os.DirFS(filepath.Join(dir, "kdb"))); err != nil {
		t.Fatal(err)
	}
	closeNode(session(11, 20, true))
	// Back to the old store, beside the snapshot with k11..k20 in it.
	if err := os.RemoveAll(filepath.Join(dir, "kdb")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(old, filepath.Join(dir, "kdb")); err != nil {
		t.Fatal(err)
	}
	n := session(21, 22, false)
	defer closeNode(n)
	var missing []string
	for i := 1; i <= 22; i++ {
		if v, err := n.fsm.Get(key(i)); err != nil || !bytes.Equal(v, key(i)) {
			missing = append(missing, fmt.Sprintf("%s (%q, %v)", key(i), v, err))
		}
	}
	if len(missing) > 0 || n.fsm.Restores() != 1 {
		t.Fatalf("restores %d, applied %d; missing %d keys: %v", n.fsm.Restores(), n.fsm.Applied(), len(missing), missing)
	}
}
