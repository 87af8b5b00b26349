package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
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
		n := bootLeader(t, cfg, peers)
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

// TestNode_ForwardKeepsTheEscapedKey: a follower forwards a PUT to the
// leader under the path as the client escaped it. It rebuilt the URL from
// the decoded path, so a key holding '?', '#' or '%' was stored under
// another key (a%3Fb as "a", c%2541 as "cA"), and a key whose decoded form
// is no URL (%25zz) made the ignored http.NewRequest error a nil request,
// and the handler panicked. A leader address that is no URL is a 5xx.
func TestNode_ForwardKeepsTheEscapedKey(t *testing.T) {
	type got struct{ key, value, from string }
	seen := make(chan got, 1)
	leader := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v, _ := io.ReadAll(r.Body)
		seen <- got{strings.TrimPrefix(r.URL.Path, "/kv/"), string(v), r.Header.Get("X-Forwarded")}
		fmt.Fprintln(w, "ok 7")
	}))
	defer leader.Close()
	n := &node{id: "n2"}
	forward := func(leaderAddr, escaped string) *httptest.ResponseRecorder {
		t.Helper()
		rec := httptest.NewRecorder()
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Fatalf("forward of /kv/%s panicked: %v", escaped, r)
				}
			}()
			n.forward(rec, httptest.NewRequest(http.MethodPut, "/kv/"+escaped, nil), leaderAddr, []byte("V-"+escaped))
		}()
		return rec
	}
	for _, c := range []struct{ escaped, key string }{
		{"plain", "plain"}, {"a%3Fb", "a?b"}, {"x%23y", "x#y"}, {"c%2541", "c%41"}, {"%25zz", "%zz"},
		{"a%2Fb", "a/b"}, {"sp%20ace", "sp ace"}, {"%C3%A9", "é"},
	} {
		rec := forward(strings.TrimPrefix(leader.URL, "http://"), c.escaped)
		if rec.Code != http.StatusOK || rec.Body.String() != "ok 7\n" {
			t.Errorf("PUT /kv/%s: %d %q, want the leader's 200 \"ok 7\"", c.escaped, rec.Code, rec.Body)
			continue
		}
		if g := <-seen; g != (got{c.key, "V-" + c.escaped, "n2"}) {
			t.Errorf("PUT /kv/%s reached the leader as key %q, value %q, X-Forwarded %q; want key %q", c.escaped, g.key, g.value, g.from, c.key)
		}
	}
	if rec := forward("bad host:1", "k"); rec.Code < 500 {
		t.Errorf("forward to a leader address that is no URL: %d %q, want a 5xx", rec.Code, rec.Body)
	}
}

// TestNode_RestartWithTheOtherStoreRefused: a node restarted on its -dir
// with the other -store (boltdb, then kdb) found an empty raft log beside
// an FSM that had applied its entries: it bootstrapped a new log from index
// 1 and the FSM skipped every entry up to its applied index, so PUTs were
// answered "ok" and never applied. The node must refuse to start, and start
// again with the store it ran with, every PUT there.
func TestNode_RestartWithTheOtherStoreRefused(t *testing.T) {
	ports := freePorts(t, 2)
	peers := []peer{{"n1", fmt.Sprintf("127.0.0.1:%d", ports[0]), fmt.Sprintf("127.0.0.1:%d", ports[1])}}
	dir := t.TempDir()
	cfg := nodeConfig{dir: dir, store: "boltdb", logLevel: "error", threshold: 1 << 20, interval: time.Hour,
		trailing: 1 << 20, fast: true}
	n := bootLeader(t, cfg, peers)
	for i := range 5 {
		if err := n.r.Apply(kvfsm.EncodePut(fmt.Appendf(nil, "k%d", i), []byte("v")), 5*time.Second).Error(); err != nil {
			n.close()
			t.Fatal(err)
		}
	}
	applied := n.fsm.Applied()
	if err := n.close(); err != nil {
		t.Fatal(err)
	}
	cfg.store = "kdb"
	n = &node{id: "n1", peers: peers}
	err := n.boot(cfg)
	if cerr := n.close(); cerr != nil {
		t.Fatal(cerr)
	}
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("applied up to index %d", applied)) {
		t.Fatalf("restart with -store kdb after -store boltdb (FSM applied %d): %v, want a refusal naming the applied index", applied, err)
	}
	cfg.store = "boltdb"
	n = &node{id: "n1", peers: peers}
	if err := n.boot(cfg); err != nil {
		t.Fatal(errors.Join(err, n.close()))
	}
	defer func() {
		if err := n.close(); err != nil {
			t.Error(err)
		}
	}()
	if v, err := n.fsm.Get([]byte("k4")); err != nil || string(v) != "v" {
		t.Fatalf("back on -store boltdb: k4 %q, %v", v, err)
	}
}

// TestNode_RestartWithoutItsNewestSnapshotRefused: a node whose raft
// snapshot store lost the newest snapshot (its directory removed), or all of
// snapshots/, has a log that starts past the entry after the newest
// snapshot left: raft.NewRaft read the missing entries and panicked ("log
// not found"). The node must refuse to start, naming what is missing, and
// start again once the snapshot is back.
func TestNode_RestartWithoutItsNewestSnapshotRefused(t *testing.T) {
	ports := freePorts(t, 2)
	peers := []peer{{"n1", fmt.Sprintf("127.0.0.1:%d", ports[0]), fmt.Sprintf("127.0.0.1:%d", ports[1])}}
	dir := t.TempDir()
	cfg := nodeConfig{dir: dir, store: "kdb", logLevel: "error", threshold: 1 << 20, interval: time.Hour,
		trailing: 2, fast: true}
	n := bootLeader(t, cfg, peers)
	for i := range 20 {
		if err := n.r.Apply(kvfsm.EncodePut(fmt.Appendf(nil, "k%02d", i), []byte("v")), 5*time.Second).Error(); err != nil {
			n.close()
			t.Fatal(err)
		}
		if i == 9 || i == 19 {
			if err := n.r.Snapshot().Error(); err != nil {
				n.close()
				t.Fatal(err)
			}
		}
	}
	if err := n.close(); err != nil {
		t.Fatal(err)
	}
	snaps, err := raft.NewFileSnapshotStore(dir, 2, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	metas, err := snaps.List()
	if err != nil || len(metas) != 2 {
		t.Fatalf("snapshots: %v, %v; want 2", metas, err)
	}
	snapDir := filepath.Join(dir, "snapshots")
	newest := filepath.Join(snapDir, metas[0].ID)
	aside := filepath.Join(dir, "aside")
	boot := func(what string) error {
		t.Helper()
		n := &node{id: "n1", peers: peers}
		var err error
		func() {
			defer func() {
				if r := recover(); r != nil {
					err = fmt.Errorf("panic: %v", r)
				}
			}()
			err = n.boot(cfg)
		}()
		if cerr := n.close(); cerr != nil {
			t.Fatalf("%s: close: %v", what, cerr)
		}
		return err
	}
	if err := os.Rename(newest, aside); err != nil {
		t.Fatal(err)
	}
	if err := boot("newest snapshot gone"); err == nil || !strings.Contains(err.Error(), "are in neither") {
		t.Fatalf("restart without the newest snapshot: %v, want a refusal naming the missing entries", err)
	}
	if err := os.Rename(snapDir, snapDir+".aside"); err != nil {
		t.Fatal(err)
	}
	if err := boot("snapshots/ gone"); err == nil || !strings.Contains(err.Error(), "no snapshot in raft's snapshot store: entries 1..") {
		t.Fatalf("restart without snapshots/: %v, want a refusal naming the missing entries", err)
	}
	if err := os.RemoveAll(snapDir); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(snapDir+".aside", snapDir); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(aside, newest); err != nil {
		t.Fatal(err)
	}
	n = bootLeader(t, cfg, peers)
	defer func() {
		if err := n.close(); err != nil {
			t.Error(err)
		}
	}()
	if v, err := n.fsm.Get([]byte("k19")); err != nil || string(v) != "v" {
		t.Fatalf("with the snapshot back: k19 %q, %v", v, err)
	}
}

// bootLeader boots node n1 of peers (a cluster of one) with cfg and waits
// until it leads.
func bootLeader(t *testing.T, cfg nodeConfig, peers []peer) *node {
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
	return n
}
