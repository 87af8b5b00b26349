package kvfsm

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
	"github.com/kdb-project/kdb"
)

// TestFSM_RestoreDirNotOurs: Restore works in a directory beside the
// store (DIR.restore), which Open removes as an interrupted Restore's
// leftover. A directory of that name that Restore did not make (an
// operator's copy of the store, say) is not removed: Open and Restore
// refuse, naming it, and its files stay. An empty one, or one that holds
// Restore's mark, is Restore's to remove.
func TestFSM_RestoreDirNotOurs(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "node")
	db, f := open(t, dir)
	f.ApplyBatch([]*raft.Log{put(1, "a", "1")})
	snap := snapshotBytes(t, f)
	theirs := filepath.Join(dir+".restore", "backup.tar")
	if err := os.MkdirAll(filepath.Dir(theirs), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(theirs, []byte("an operator's file"), 0o600); err != nil {
		t.Fatal(err)
	}
	err := f.Restore(io.NopCloser(bytes.NewReader(snap)))
	if !errors.Is(err, kdb.ErrInvalid) {
		t.Errorf("Restore with %s holding an operator's file: %v, want kdb.ErrInvalid", filepath.Dir(theirs), err)
	}
	if _, err := os.Stat(theirs); err != nil {
		t.Fatalf("Restore removed a directory it did not make: %v", err)
	}
	if _, err := Open(db, nil, Options{}); !errors.Is(err, kdb.ErrInvalid) {
		t.Errorf("Open with %s holding an operator's file: %v, want kdb.ErrInvalid", filepath.Dir(theirs), err)
	}
	if _, err := os.Stat(theirs); err != nil {
		t.Fatalf("Open removed a directory Restore did not make: %v", err)
	}
	// Moved away: Restore works, and leaves nothing behind.
	if err := os.RemoveAll(filepath.Dir(theirs)); err != nil {
		t.Fatal(err)
	}
	if err := f.Restore(io.NopCloser(bytes.NewReader(snap))); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir + ".restore"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("after Restore: %v, want %s gone", err, dir+".restore")
	}
	// A leftover of a Restore (its mark, the scratch store) and an empty
	// directory are removed by Open.
	for _, mark := range []bool{true, false} {
		if err := os.Mkdir(dir+".restore", 0o750); err != nil {
			t.Fatal(err)
		}
		if mark {
			if err := os.WriteFile(filepath.Join(dir+".restore", restoreMark), nil, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Mkdir(filepath.Join(dir+".restore", "snapshot"), 0o750); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := Open(db, nil, Options{}); err != nil {
			t.Fatalf("Open over a leftover (mark %v): %v", mark, err)
		}
		if _, err := os.Stat(dir + ".restore"); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("after Open over a leftover (mark %v): %v, want it gone", mark, err)
		}
	}
}

// TestFSM_KillDuringRestoreDirRemoval SIGKILLs a child process while it
// removes a Restore's leftover directory (removeRestoreDir, what Open and
// Restore's return do), at many moments: when 49, 45, ..., 1 of its 49
// entries are left (the mark among files and directories whose names
// change each round, and so their place in the listing), and Open must
// then remove what is left by itself. It removed it with os.RemoveAll, in
// the order the directory lists its entries: a kill after the mark went
// left an unmarked directory, and every later Open refused the node
// ("exists and is not a directory Restore made"): a cluster test's node
// never restarted.
func TestFSM_KillDuringRestoreDirRemoval(t *testing.T) {
	if work := os.Getenv("KVFSM_RMDIR_CHILD"); work != "" {
		fmt.Println("ready")
		fmt.Println("removed:", removeRestoreDir(work))
		select {} // until killed
	}
	dir := filepath.Join(t.TempDir(), "node")
	db, _ := open(t, dir)
	defer db.Close()
	work := dir + ".restore"
	const entries = 48 // besides the mark; every 12th a directory of 10 files
	write := func(name string) {
		t.Helper()
		if err := os.WriteFile(name, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for round := 0; round < 13; round++ {
		left := entries + 1 - 4*round // entries left when the kill is sent
		if err := os.Mkdir(work, 0o750); err != nil {
			t.Fatal(err)
		}
		for i := range entries {
			if i == entries/2 {
				write(filepath.Join(work, restoreMark))
			}
			name := filepath.Join(work, fmt.Sprintf("r%d-%d", round, i))
			if i%12 != 0 {
				write(name)
				continue
			}
			if err := os.Mkdir(name, 0o750); err != nil {
				t.Fatal(err)
			}
			for j := range 10 {
				write(filepath.Join(name, fmt.Sprint(j)))
			}
		}
		cmd := exec.Command(os.Args[0], "-test.run=^TestFSM_KillDuringRestoreDirRemoval$")
		cmd.Env = append(os.Environ(), "KVFSM_RMDIR_CHILD="+work)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(out)
		if !sc.Scan() || sc.Text() != "ready" {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("round %d: the child did not start: %q", round, sc.Text())
		}
		for {
			ents, err := os.ReadDir(work)
			if err != nil || len(ents) <= left {
				break
			}
		}
		cmd.Process.Kill()
		var rest strings.Builder
		for sc.Scan() {
			rest.WriteString(sc.Text())
		}
		cmd.Wait()
		if s := rest.String(); s != "" && s != "removed: <nil>" {
			t.Fatalf("round %d: the child: %s", round, s)
		}
		ents, _ := os.ReadDir(work)
		if _, err := Open(db, nil, Options{}); err != nil {
			t.Fatalf("round %d: Open after a kill with %d of %d entries left: %v", round, len(ents), entries+1, err)
		}
		if _, err := os.Stat(work); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("round %d: after Open: %v, want %s gone", round, err, work)
		}
	}
}

// A link to nothing at DIR.restore is not Restore's: Open and Restore
// refuse it, naming it (Open took it for absent, and every Restore then
// failed on its Mkdir with a bare "file exists": a follower never installed
// a snapshot; an outside tester's finding).
func TestFSM_RestoreDirDanglingLinkRefused(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "node")
	db, f := open(t, dir)
	f.ApplyBatch([]*raft.Log{put(1, "a", "1")})
	snap := snapshotBytes(t, f)
	if err := os.Symlink(filepath.Join(root, "nowhere"), dir+".restore"); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(db, nil, Options{}); !errors.Is(err, kdb.ErrInvalid) || !strings.Contains(err.Error(), "link to nothing") {
		t.Errorf("Open with a dangling %s.restore: %v, want kdb.ErrInvalid naming the link", dir, err)
	}
	if err := f.Restore(io.NopCloser(bytes.NewReader(snap))); !errors.Is(err, kdb.ErrInvalid) || !strings.Contains(err.Error(), "link to nothing") {
		t.Errorf("Restore with a dangling %s.restore: %v, want kdb.ErrInvalid naming the link", dir, err)
	}
	if _, err := os.Lstat(dir + ".restore"); err != nil {
		t.Fatalf("the link was removed: %v", err)
	}
	if err := os.Remove(dir + ".restore"); err != nil {
		t.Fatal(err)
	}
	if err := f.Restore(io.NopCloser(bytes.NewReader(snap))); err != nil {
		t.Fatalf("Restore once the link was moved away: %v", err)
	}
}
