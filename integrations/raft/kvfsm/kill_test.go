package kvfsm

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/kdb-project/kdb"
)

// killSnapshot writes the snapshot of an FSM that applied n puts of size
// bytes each (keys p-0000.., applied index n) to path, and returns its state.
func killSnapshot(t *testing.T, path, p string, n, size int) map[string]string {
	t.Helper()
	db, f := open(t, filepath.Join(t.TempDir(), p))
	defer db.Close()
	want := map[string]string{}
	var logs []*raft.Log
	for i := 1; i <= n; i++ {
		k, v := fmt.Sprintf("%s-%04d", p, i), strings.Repeat(p, size)
		logs = append(logs, put(uint64(i), k, v))
		want[k] = v
	}
	f.ApplyBatch(logs)
	if err := os.WriteFile(path, snapshotBytes(t, f), 0o644); err != nil {
		t.Fatal(err)
	}
	return want
}

// restoreChild is the child process of TestFSM_KillDuringRestore: it
// restores the snapshots named in snaps (comma-separated) into the FSM in
// dir, one after the other, round and round, until it is killed, printing
// "begin" before each Restore.
func restoreChild(dir, snaps string) {
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(3)
	}
	db, err := kdb.Open(dir, nil)
	if err != nil {
		fail(err)
	}
	f, err := Open(db, nil, Options{})
	if err != nil {
		fail(err)
	}
	for {
		for _, p := range strings.Split(snaps, ",") {
			b, err := os.ReadFile(p)
			if err != nil {
				fail(err)
			}
			if _, err := os.Stdout.WriteString("begin\n"); err != nil {
				os.Exit(4)
			}
			if err := f.Restore(io.NopCloser(bytes.NewReader(b))); err != nil {
				fail(err)
			}
		}
	}
}

// TestFSM_KillDuringRestore SIGKILLs a child process that restores two
// snapshots (A: 300 keys of 4 KiB, B: 600 of 2 KiB) into an FSM on disk,
// in turn, at a random moment during a Restore, and reopens the store each
// time: the state is exactly the initial one, A's or B's (never a mix),
// the store checks clean, and Open leaves nothing of the interrupted
// Restore beside the store (its scratch store and kdb.Import's temporary
// directory and lock: a killed Restore left up to a whole snapshot's copy
// there until the next Restore).
func TestFSM_KillDuringRestore(t *testing.T) {
	if dir := os.Getenv("KVFSM_KILL_CHILD"); dir != "" {
		restoreChild(dir, os.Getenv("KVFSM_KILL_SNAPS"))
		return
	}
	tmp := t.TempDir()
	states := map[uint64]map[string]string{
		1:   {"init": "x"},
		300: killSnapshot(t, filepath.Join(tmp, "a.snap"), "A", 300, 4<<10),
		600: killSnapshot(t, filepath.Join(tmp, "b.snap"), "B", 600, 2<<10),
	}
	parent := filepath.Join(tmp, "node")
	if err := os.Mkdir(parent, 0o755); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(parent, "kdb")
	db, f := open(t, dir)
	f.ApplyBatch([]*raft.Log{put(1, "init", "x")})
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	rounds := 8
	if testing.Short() {
		rounds = 4
	}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	seen := map[uint64]int{}
	for round := 0; round < rounds; round++ {
		cmd := exec.Command(os.Args[0], "-test.run=^TestFSM_KillDuringRestore$")
		cmd.Env = append(os.Environ(), "KVFSM_KILL_CHILD="+dir,
			"KVFSM_KILL_SNAPS="+filepath.Join(tmp, "a.snap")+","+filepath.Join(tmp, "b.snap"))
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Kill during the k-th Restore, some way into it.
		sc := bufio.NewScanner(out)
		for k := 1 + rng.IntN(3); k > 0; k-- {
			if !sc.Scan() {
				cmd.Wait()
				t.Fatalf("round %d: the child stopped: %s", round, stderr.String())
			}
		}
		time.Sleep(time.Duration(rng.IntN(300)) * time.Millisecond)
		cmd.Process.Kill()
		cmd.Wait()
		if strings.Contains(stderr.String(), "child:") {
			t.Fatalf("round %d: %s", round, stderr.String())
		}

		db, f := open(t, dir)
		m, applied := contents(t, db)
		want, ok := states[applied]
		if !ok || len(m) != len(want) || f.Applied() != applied {
			t.Fatalf("round %d: after the kill, applied %d (%d) and %d keys: not the initial state, A's or B's", round, applied, f.Applied(), len(m))
		}
		for k, v := range want {
			if m[k] != v {
				t.Fatalf("round %d: applied %d, key %q: %d bytes, want %d", round, applied, k, len(m[k]), len(v))
			}
		}
		seen[applied]++
		if _, err := db.Check(); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		ents, err := os.ReadDir(parent)
		if err != nil {
			t.Fatal(err)
		}
		var left []string
		for _, e := range ents {
			if e.Name() != "kdb" {
				left = append(left, e.Name())
			}
		}
		if len(left) > 0 {
			t.Errorf("round %d: after Open, the killed Restore's files are still beside the store: %v", round, left)
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("states after the kills (applied index: times): %v", seen)
}
