package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/broker"
	"github.com/kdb-project/kdb/vfs"
)

// storeContent is everything export promises to carry: indexes, and the
// broker's destinations (with their next sequence number), messages (with
// their sequence numbers), subscriptions and prepared transactions.
func storeContent(t *testing.T, dir string) string {
	t.Helper()
	db, err := kdb.Open(dir, &kdb.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	br, err := broker.Open(db)
	if err != nil {
		t.Fatal(err)
	}
	var sb strings.Builder
	err = db.View(func(s *kdb.Snapshot) error {
		names, err := s.Indexes()
		if err != nil {
			return err
		}
		for _, n := range names {
			it := s.Iter(n)
			for ok := it.First(); ok; ok = it.Next() {
				fmt.Fprintf(&sb, "kv %s %q %q\n", n, it.Key(), it.Value())
			}
			if err := it.Err(); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	prep, err := br.Prepared()
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(&sb, "prepared %v\n", prep)
	dests, err := br.Destinations()
	if err != nil {
		t.Fatal(err)
	}
	msgLine := func(m broker.Message) string {
		return fmt.Sprintf("%d %s %s/%d %v %q", m.Seq, m.ID, m.ProducerID, m.ProducerSeq, m.Properties, m.Body)
	}
	for _, d := range dests {
		fmt.Fprintf(&sb, "dest %s %s count %d bytes %d next %d\n", d.Kind, d.Name, d.Count, d.Bytes, d.NextSeq)
		ms, err := br.Read(d.Kind, d.Name, 0, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range ms {
			fmt.Fprintf(&sb, "  msg %s\n", msgLine(m))
		}
		if d.Kind == broker.Topic {
			subs, err := br.Subscriptions(d.Name)
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range subs {
				fmt.Fprintf(&sb, "  sub %s pending %d\n", s.Name, s.Pending)
				ms, err := br.ReadSub(d.Name, s.Name, 0, 1<<20)
				if err != nil {
					t.Fatal(err)
				}
				for _, m := range ms {
					fmt.Fprintf(&sb, "    pending %s\n", m.ID)
				}
			}
		}
	}
	return sb.String()
}

func TestExport_ImportRoundTrip(t *testing.T) {
	t.Parallel()
	dir := makeStore(t, 2000)
	db, err := kdb.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	br, err := broker.Open(db)
	if err != nil {
		t.Fatal(err)
	}
	if err := br.Subscribe("events", "billing"); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 4; i++ {
		m := &broker.Message{ID: fmt.Sprintf("p%d", i), ProducerID: "prod-1", ProducerSeq: uint64(i + 1),
			Properties: map[string]string{"n": fmt.Sprint(i)}, Body: []byte(strings.Repeat("b", 600*i))}
		if _, err := br.Send(broker.Topic, "events", m); err != nil {
			t.Fatal(err)
		}
	}
	// audit acks the first two new messages, billing only the last one;
	// the queue loses its second message.
	if err := br.AckSub("events", "audit", 6, 7); err != nil {
		t.Fatal(err)
	}
	if err := br.AckSub("events", "billing", 9); err != nil {
		t.Fatal(err)
	}
	if err := br.Ack(broker.Queue, "orders", 2); err != nil {
		t.Fatal(err)
	}
	tx := br.BeginTx()
	if err := tx.Send(broker.Queue, "orders", &broker.Message{ID: "in-doubt", Body: []byte("2pc")}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Prepare("xid-7"); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	want := storeContent(t, dir)

	file := filepath.Join(t.TempDir(), "snap.kdbx")
	code, m := runJSON(t, "export", "--json", dir, file)
	if code != 0 || m["keys"].(float64) < 2000 || m["messages"] != float64(4+4+5) {
		t.Fatalf("export: exit %d, %v", code, m)
	}
	dst := filepath.Join(t.TempDir(), "copy")
	code, m = runJSON(t, "import", "--json", file, dst)
	if code != 0 {
		t.Fatalf("import: exit %d, %v", code, m)
	}
	if code, out, _ := runTool(t, "check", dst); code != 0 {
		t.Fatalf("check of the imported store: exit %d\n%s", code, out)
	}
	if got := storeContent(t, dst); !reflect.DeepEqual(got, want) {
		t.Fatalf("imported store differs:\n--- got\n%s\n--- want\n%s", got, want)
	}

	// Importing into an existing store, or a truncated snapshot, is refused.
	if code, _, _ := runTool(t, "import", file, dst); code != 1 {
		t.Errorf("import into a store: exit %d, want 1", code)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	cut := filepath.Join(t.TempDir(), "cut.kdbx")
	if err := os.WriteFile(cut, b[:len(b)*2/3], 0o600); err != nil {
		t.Fatal(err)
	}
	x := filepath.Join(t.TempDir(), "x")
	if code, _, errs := runTool(t, "import", cut, x); code != 1 || !strings.Contains(errs, "not a valid kdb export") {
		t.Errorf("import of a truncated snapshot: exit %d: %s", code, errs)
	}
	if _, err := os.Stat(x); !os.IsNotExist(err) {
		t.Errorf("a failed import left %s behind: %v", x, err)
	}
}

// TestExport_NeverWritesThroughPlantedTemp: a FILE.tmp symlink planted to
// point elsewhere, and a foreign file at the temporary name, are neither
// written through nor clobbered; the snapshot lands at FILE, mode 0600, and
// no temporary file is left behind.
func TestExport_NeverWritesThroughPlantedTemp(t *testing.T) {
	t.Parallel()
	dir := makeStore(t, 100)
	out := t.TempDir()
	file := filepath.Join(out, "snap.kdbx")
	victim := filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(victim, []byte("precious"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, file+".tmp"); err != nil {
		t.Fatal(err)
	}
	foreign := filepath.Join(out, ".snap.kdbx.tmp")
	if err := os.WriteFile(foreign, []byte("foreign"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, errs := runTool(t, "export", dir, file); code != 0 {
		t.Fatalf("export: exit %d: %s", code, errs)
	}
	if b, _ := os.ReadFile(victim); string(b) != "precious" {
		t.Errorf("the symlink's target was written through (%d bytes)", len(b))
	}
	if b, _ := os.ReadFile(foreign); string(b) != "foreign" {
		t.Errorf("the foreign file was clobbered: %q", b)
	}
	if fi, err := os.Lstat(file + ".tmp"); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("the planted symlink is gone or changed: %v %v", fi, err)
	}
	fi, err := os.Lstat(file)
	if err != nil {
		t.Fatal(err)
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o600 {
		t.Errorf("%s: mode %v, want a regular file 0600", file, fi.Mode())
	}
	ents, _ := os.ReadDir(out)
	if len(ents) != 3 {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Errorf("left in the directory: %v, want snap.kdbx and the two planted files", names)
	}
	// The snapshot is whole: it imports.
	if code, _, errs := runTool(t, "import", file, filepath.Join(t.TempDir(), "copy")); code != 0 {
		t.Errorf("import of the export: exit %d: %s", code, errs)
	}
	// Replacing an existing FILE works too and keeps it 0600.
	if err := os.Chmod(file, 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, errs := runTool(t, "export", dir, file); code != 0 {
		t.Fatalf("second export: exit %d: %s", code, errs)
	}
	if fi, err := os.Lstat(file); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("after a second export: %v %v", fi, err)
	}
}

// TestExport_ThroughASymlink: FILE a symbolic link (to the backup disk)
// gets the snapshot written where it points, atomically there, and the link
// stays. Export used to rename its temporary file over the link itself: the
// snapshot landed beside the link and the file it pointed to kept the old
// snapshot, silently. A link to a file not made yet gets it made; a link to
// a directory is refused.
func TestExport_ThroughASymlink(t *testing.T) {
	t.Parallel()
	dir := makeStore(t, 100)
	backup := t.TempDir()
	target := filepath.Join(backup, "snap.kdbx")
	if err := os.WriteFile(target, []byte("yesterday"), 0o600); err != nil {
		t.Fatal(err)
	}
	local := t.TempDir()
	link := filepath.Join(local, "snap.kdbx")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if code, _, errs := runTool(t, "export", dir, link); code != 0 {
		t.Fatalf("export through a link: exit %d: %s", code, errs)
	}
	if st, err := os.Lstat(link); err != nil || st.Mode()&os.ModeSymlink == 0 {
		t.Errorf("the link was replaced: %v", err)
	}
	if b, err := os.ReadFile(target); err != nil || string(b) == "yesterday" {
		t.Errorf("the linked file still holds the old snapshot (%v)", err)
	}
	if code, _, errs := runTool(t, "import", link, filepath.Join(t.TempDir(), "copy")); code != 0 {
		t.Errorf("import of the snapshot through the link: exit %d: %s", code, errs)
	}
	if ents, _ := os.ReadDir(local); len(ents) != 1 {
		t.Errorf("the link's directory holds %v, want the link alone", ents)
	}

	fresh := filepath.Join(local, "fresh.kdbx")
	if err := os.Symlink(filepath.Join(backup, "fresh.kdbx"), fresh); err != nil {
		t.Fatal(err)
	}
	if code, _, errs := runTool(t, "export", dir, fresh); code != 0 {
		t.Errorf("export through a link to a new file: exit %d: %s", code, errs)
	}
	if _, err := os.Stat(filepath.Join(backup, "fresh.kdbx")); err != nil {
		t.Errorf("the link's target was not written: %v", err)
	}

	toDir := filepath.Join(local, "dir.kdbx")
	if err := os.Symlink(backup, toDir); err != nil {
		t.Fatal(err)
	}
	if code, _, _ := runTool(t, "export", dir, toDir); code == 0 {
		t.Errorf("export through a link to a directory: exit 0")
	}
	if st, err := os.Lstat(toDir); err != nil || st.Mode()&os.ModeSymlink == 0 {
		t.Errorf("the link to a directory was replaced: %v", err)
	}
}

// TestExportStore_SyncsFileThenRenameThenDirectory: the snapshot is
// durable when export returns: its temporary file is fsynced before the
// rename that names it, and the directory after (a power loss could
// otherwise leave a partial or empty snapshot under the name, or none).
// The operations are seen through vfs.Intercept on the real file system.
func TestExportStore_SyncsFileThenRenameThenDirectory(t *testing.T) {
	store := makeStore(t, 50)
	db, err := kdb.Open(store, &kdb.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	outDir := t.TempDir()
	file := filepath.Join(outDir, "snap.kdbx")
	var ops []string
	fsys := vfs.Intercept(vfs.OS, func(e vfs.Event) error {
		switch e.Op {
		case vfs.OpSync, vfs.OpClose, vfs.OpSyncDir:
			ops = append(ops, e.Op.String()+" "+filepath.Base(e.Path))
		case vfs.OpRename:
			ops = append(ops, "rename "+filepath.Base(e.Path)+" "+filepath.Base(e.NewPath))
		}
		return nil
	})
	var out exportOut
	if err := exportStore(context.Background(), fsys, db, file, &out); err != nil {
		t.Fatal(err)
	}
	if len(ops) != 4 {
		t.Fatalf("export's syncs, close and rename: %q, want the file's sync, its close, the rename, the directory's sync", ops)
	}
	tmp := strings.TrimPrefix(ops[0], "sync ")
	if want := []string{"sync " + tmp, "close " + tmp, "rename " + tmp + " snap.kdbx", "syncdir " + filepath.Base(outDir)}; !reflect.DeepEqual(ops, want) || !isExportTemp(tmp, file) {
		t.Fatalf("export's syncs, close and rename: %q, want %q (a temporary file of the export's)", ops, want)
	}
	if out.Keys == 0 {
		t.Fatalf("export reported %+v", out)
	}
	dst := filepath.Join(t.TempDir(), "copy")
	if code, _, errs := runTool(t, "import", file, dst); code != 0 {
		t.Fatalf("import of the snapshot: exit %d: %s", code, errs)
	}
	if got, want := storeContent(t, dst), storeContent(t, store); got != want {
		t.Fatal("the snapshot does not import to the store it was taken of")
	}
}

// TestExport_TempTakenBeforeItsLock: an export created its temporary file
// and only then locked it; another export's removal of stale temporary
// files could come in between (two exports to one FILE at once). It
// removed the new file as unlocked, and the first export's lock then
// created an empty file at that name, which it renamed over FILE: FILE was
// left empty by an export that exited 0. Or it held the file's lock just
// then, and the export failed with ErrLocked. Here that other export's
// removal (or its lock) comes exactly in between (a hook): the export makes
// its file again under a new name, and FILE is a whole snapshot.
func TestExport_TempTakenBeforeItsLock(t *testing.T) {
	src := makeStore(t, 300)
	want := storeContent(t, src)
	for _, how := range []string{"removed", "locked"} {
		out := t.TempDir()
		file := filepath.Join(out, "snap.kdbx")
		calls := 0
		testHookExportCreated = func(tmp string) {
			if filepath.Dir(tmp) != out {
				return
			}
			calls++
			if calls > 1 {
				return
			}
			if how == "removed" {
				// Another export, starting: the new file is not locked yet.
				if removed, err := removeStaleExportTemps(file); err != nil || len(removed) != 1 {
					t.Errorf("the other export removed %v (%v), want the new temporary file", removed, err)
				}
				return
			}
			// Another export holds its lock, about to remove it.
			lk, err := vfs.OS.Lock(tmp)
			if err != nil {
				t.Errorf("locking %s: %v", tmp, err)
				return
			}
			t.Cleanup(func() { os.Remove(tmp); lk.Close() })
		}
		code, _, errs := runTool(t, "export", src, file)
		testHookExportCreated = nil
		if code != exitOK {
			t.Fatalf("%s: export: exit %d: %s", how, code, errs)
		}
		if calls != 2 {
			t.Errorf("%s: the export created %d temporary files, want 2 (the second after the first was taken)", how, calls)
		}
		dst := filepath.Join(t.TempDir(), "copy")
		if code, _, errs := runTool(t, "import", file, dst); code != exitOK {
			t.Fatalf("%s: import of FILE: exit %d: %s", how, code, errs)
		}
		if storeContent(t, dst) != want {
			t.Fatalf("%s: FILE does not import to the store", how)
		}
	}
}
