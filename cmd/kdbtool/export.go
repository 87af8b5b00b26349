package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/broker"
	"github.com/kdb-project/kdb/vfs"
	"golang.org/x/sys/unix"
)

func init() {
	register("export", command{
		summary: "write a portable, versioned snapshot of the whole store (indexes, destinations, subscriptions, prepared transactions) to FILE",
		run:     runExport,
	})
	register("import", command{
		summary: "create a new store in DIR from a snapshot written by export",
		run:     runImport,
	})
}

// The snapshot is kdb's export format (docs/FORMAT.md §6): every tree of the
// store with every key and value, so an import is the same store, sequence
// numbers, producer audit and prepared transactions included.
const exportFormatName = "kdb snapshot (FORMAT.md §6)"

// errBadSnapshot marks a file that is not a whole, valid snapshot.
var errBadSnapshot = errors.New("not a valid kdb export")

type exportOut struct {
	File          string   `json:"file"`
	Version       int      `json:"version"`
	Trees         uint64   `json:"trees"`
	Indexes       int      `json:"indexes"`
	Keys          uint64   `json:"keys"`
	Bytes         uint64   `json:"bytes"`
	Destinations  int      `json:"destinations"`
	Subscriptions int      `json:"subscriptions"`
	Messages      uint64   `json:"messages"`
	Prepared      int      `json:"prepared"`
	Warnings      []string `json:"warnings"`
}

func kindName(k broker.DestKind) string {
	if k == broker.Topic {
		return "topic"
	}
	return "queue"
}

func parseKind(s string) (broker.DestKind, error) {
	switch s {
	case "queue":
		return broker.Queue, nil
	case "topic":
		return broker.Topic, nil
	}
	return 0, fmt.Errorf("unknown destination kind %q", s)
}

// summarize counts what the store holds, for the report.
func summarize(db *kdb.DB, out *exportOut) error {
	err := db.View(func(s *kdb.Snapshot) error {
		names, err := s.Indexes()
		out.Indexes = len(names)
		return err
	})
	if err != nil {
		return err
	}
	dests, err := brokerOf(db).Destinations()
	if err != nil {
		return err
	}
	out.Destinations = len(dests)
	for _, d := range dests {
		out.Messages += d.Count
		if d.Kind == broker.Topic {
			subs, err := brokerOf(db).Subscriptions(d.Name)
			if err != nil {
				return err
			}
			out.Subscriptions += len(subs)
		}
	}
	prep, err := brokerOf(db).Prepared()
	out.Prepared = len(prep)
	return err
}

func runExport(args []string, stdout, stderr io.Writer) int {
	// ctrl-C (or SIGTERM) stops the export at its next write of the
	// snapshot, which removes the temporary file: FILE is as it was. It is
	// handled from the start, so that one during the checks below is too
	// (exit 130), not the signal's default action.
	ctx, stop := onInterrupt()
	defer stop()
	fs := newFlags("export", "DIR FILE", stderr)
	asJSON := fs.Bool("json", false, "print one JSON document")
	skip := fs.Bool("skip-damaged", false, "read a store whose journal is damaged before its tail as recover --skip-damaged opens it (the warnings list what was skipped)")
	if code := parseFlags(fs, args, stdout); code >= 0 {
		return code
	}
	if testHookFlagsParsed != nil {
		testHookFlagsParsed(ctx)
	}
	if err := nArgs(fs, "DIR", "FILE"); err != nil {
		return argsFailed(fs, stdout, err)
	}
	// ".." resolved as the kernel does (vfs.CleanPath): never the files of
	// two directories mixed, nor FILE's place in DIR missed.
	dir, file := vfs.CleanPath(fs.Arg(0)), vfs.CleanPath(fs.Arg(1))
	if err := pathArg(fs, "DIR", dir); err != nil {
		return argsFailed(fs, stdout, err)
	}
	if err := pathArg(fs, "FILE", file); err != nil {
		return argsFailed(fs, stdout, err)
	}
	if file == "-" {
		// Not standard output: a run spoiled by a live checkpoint is
		// retried from the start (retryLive), and a pipe cannot take back
		// what the spoiled run wrote. Before, this wrote a file named "-".
		err := errors.New("FILE - (standard output) is not supported: export writes the snapshot to a temporary file beside FILE and renames it into place; name a file (kdbtool import reads - from standard input)")
		return failed(stdout, stderr, "export", *asJSON, "", err, exitUsage)
	}
	if err := storeExists(dir); err != nil {
		return failed(stdout, stderr, "export", *asJSON, "", err, exitFor(err))
	}
	// FILE a symbolic link (to a backup disk) names the file it points to:
	// the snapshot is written beside that one and renamed over it, and the
	// link stays (renamed over the link itself, the snapshot landed beside
	// it and the file it points to kept the old one).
	name := file
	file, err := linkTarget(file)
	if err != nil {
		return failed(stdout, stderr, "export", *asJSON, "", err, exitIO)
	}
	// Export is read-only: a FILE in the store's own directory (named
	// directly, or through a link to it or to one of its files) would put
	// a foreign file in the store, or replace one of the store's files.
	if inside, err := sameDir(filepath.Dir(file), dir); err == nil && inside {
		err = fmt.Errorf("%s is inside the store's directory %s: export writes the snapshot beside FILE and renames it over FILE, which could replace one of the store's files; name a file outside it", file, dir)
		return failed(stdout, stderr, "export", *asJSON, "", err, exitUsage)
	}
	// The snapshot is renamed over FILE: a FILE that is not a regular file
	// (a device such as /dev/full, a FIFO, a socket, a directory) would be
	// replaced, the device node by a regular file, so it is refused.
	if st, err := os.Stat(file); err == nil && !st.Mode().IsRegular() {
		err = fmt.Errorf("%s is not a regular file (%s): export writes the snapshot to a new file and renames it over FILE; name a regular file or a new name", file, vfs.FileKind(st.Mode()))
		return failed(stdout, stderr, "export", *asJSON, "", err, exitUsage)
	}
	stale, err := removeStaleExportTemps(file)
	if err != nil {
		return failed(stdout, stderr, "export", *asJSON, "", err, exitIO)
	}
	out, err := retryLive(dir, func() (*exportOut, bool, error) {
		out := &exportOut{File: file, Version: 1, Warnings: []string{}}
		for _, n := range stale {
			out.Warnings = append(out.Warnings, "removed "+n+", the temporary file of an interrupted export")
		}
		db, err := kdb.Open(dir, &kdb.Options{ReadOnly: true, SkipDamagedJournal: *skip})
		if err != nil {
			return out, false, err
		}
		defer db.Close()
		for _, sk := range db.Recovery().Skipped {
			out.Warnings = append(out.Warnings, "skipped: "+oneLine(sk))
		}
		if err := exportStore(ctx, vfs.OS, db, file, out); err != nil {
			return out, false, err
		}
		err = summarize(db, out)
		return out, err == nil, err
	})
	if errors.Is(err, errInterrupted) {
		err = fmt.Errorf("%w: the partial snapshot was removed; %s is as it was", err, file)
		return failed(stdout, stderr, "export", *asJSON, "", err, exitInterrupted)
	}
	if err != nil {
		return failed(stdout, stderr, "export", *asJSON, "", err, exitFor(err))
	}
	if *asJSON {
		return writeJSON(stdout, out)
	}
	for _, w := range out.Warnings {
		fmt.Fprintf(stderr, "kdbtool export: %s\n", w)
	}
	if name != file {
		fmt.Fprintf(stdout, "%s links to %s\n", name, file)
	}
	fmt.Fprintf(stdout, "exported to %s (%s): %d trees, %d keys; %d indexes, %d destinations, %d subscriptions, %d messages, %d prepared transactions\n",
		file, exportFormatName, out.Trees, out.Keys, out.Indexes, out.Destinations, out.Subscriptions, out.Messages, out.Prepared)
	return exitOK
}

// sameDir reports whether the directories a and b are the same one
// (through symbolic links too).
func sameDir(a, b string) (bool, error) {
	sa, err := os.Stat(a)
	if err != nil {
		return false, err
	}
	sb, err := os.Stat(b)
	if err != nil {
		return false, err
	}
	return os.SameFile(sa, sb), nil
}

// linkTarget follows p while it is a symbolic link and returns the name
// it ends at (which need not exist yet); p itself if it is not a link.
func linkTarget(p string) (string, error) {
	for range 40 {
		st, err := os.Lstat(p)
		if err != nil || st.Mode()&os.ModeSymlink == 0 {
			return p, nil
		}
		l, err := os.Readlink(p)
		if err != nil {
			return "", err
		}
		if !filepath.IsAbs(l) {
			l = filepath.Join(filepath.Dir(p), l)
		}
		p = l
	}
	return "", fmt.Errorf("%s: too many levels of symbolic links", p)
}

// exportTempPrefix is the name of file's temporary file (exportStore)
// up to the random digits createExportTemp appends.
func exportTempPrefix(file string) string { return "." + filepath.Base(file) + ".tmp-" }

// isExportTemp reports whether name is a temporary file name of an export
// to file: exportTempPrefix and then only digits.
func isExportTemp(name, file string) bool {
	digits, ok := strings.CutPrefix(name, exportTempPrefix(file))
	if !ok || digits == "" || len(digits) > 20 {
		return false
	}
	for _, c := range digits {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// removeStaleExportTemps removes the temporary files that interrupted
// exports to file (killed before they renamed or removed them) left in
// file's directory: regular files named as exportStore names them whose
// lock nobody holds (a running export holds the lock of its own). It
// returns the names it removed. Other names (a symlink, a file.tmp, a
// foreign file) are never touched.
func removeStaleExportTemps(file string) ([]string, error) {
	dir := filepath.Dir(file)
	ents, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil // createExportTemp reports it
		}
		return nil, err
	}
	var removed []string
	for _, e := range ents {
		if !e.Type().IsRegular() || !isExportTemp(e.Name(), file) {
			continue
		}
		p := filepath.Join(dir, e.Name())
		lk, err := lockExportTemp(p)
		if err != nil {
			continue // a running export's, or gone meanwhile
		}
		err = os.Remove(p)
		if cerr := lk.Close(); err == nil {
			err = cerr
		}
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return removed, err
		}
		removed = append(removed, e.Name())
	}
	if len(removed) > 0 {
		if err := syncDir(dir); err != nil {
			return removed, err
		}
	}
	return removed, nil
}

// exportStore writes the snapshot to a new temporary file in file's
// directory, syncs it, renames it over file and syncs the directory. On
// return (nil) the file is durable. The temporary file is created
// exclusively (O_CREATE|O_EXCL: never an existing file, never through a
// symlink) with a random name and mode 0600, so nothing planted in the
// directory (a file.tmp symlink, a foreign file) is ever written through or
// clobbered; a failed export removes only the file it created. While it is
// written the export holds the file's lock (lockExportTemp), so that another
// export never takes it for the leftover of an interrupted one
// (removeStaleExportTemps). Once ctx is done (SIGINT), the next write
// fails with errInterrupted, and the temporary file is removed.
func exportStore(ctx context.Context, fsys vfs.FS, db *kdb.DB, file string, out *exportOut) error {
	dir := filepath.Dir(file)
	f, tmp, lk, err := createExportTemp(fsys, file)
	if err != nil {
		return err
	}
	defer lk.Close()
	w := io.Writer(ctxWriter{ctx, &appendWriter{f: f}})
	if testHookExporting != nil {
		w = &hookWriter{w: w, hook: func() { testHookExporting(ctx) }}
	}
	rep, err := db.Export(w)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = fsys.Rename(tmp, file)
	}
	if err != nil {
		fsys.Remove(tmp)
		return err
	}
	if err := fsys.SyncDir(dir); err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	out.Trees, out.Keys, out.Bytes = rep.Trees, rep.Keys, rep.Bytes
	return nil
}

// createExportTemp creates file's temporary file, exclusively and with mode
// 0600 (exportTempPrefix and random digits, another draw if that name is
// taken), and takes its lock. Between the create and the lock another
// export's removeStaleExportTemps may take the new file for a stale one
// and remove it (or hold its lock to do so): the lock is then refused, or
// taken on a name that no longer exists, and the file is made again under a
// new name. A lock that succeeds is on the file the name still holds, which
// is the one created: only an O_EXCL create makes a file at such a name.
func createExportTemp(fsys vfs.FS, file string) (vfs.File, string, io.Closer, error) {
	prefix := filepath.Join(filepath.Dir(file), exportTempPrefix(file))
	for try := 0; ; try++ {
		tmp := prefix + strconv.FormatUint(uint64(rand.Uint32()), 10)
		f, err := fsys.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
		if errors.Is(err, os.ErrExist) && try < 100 {
			continue
		}
		if err != nil {
			return nil, tmp, nil, err
		}
		if testHookExportCreated != nil {
			testHookExportCreated(tmp)
		}
		lk, err := lockExportTemp(tmp)
		if err == nil {
			return f, tmp, lk, nil
		}
		f.Close()
		if !errors.Is(err, errTempTaken) || try >= 100 {
			fsys.Remove(tmp)
			return nil, tmp, nil, err
		}
	}
}

// errTempTaken: an export's temporary file was removed, or is being
// removed, by another export, which took it for a stale one.
var errTempTaken = errors.New("the temporary file was taken by another export")

// testHookExportCreated, if set (by tests only), runs once an export has
// created its temporary file, before it locks it.
var testHookExportCreated func(tmp string)

// lockExportTemp takes the lock of the export temporary file tmp: an
// exclusive flock, never waiting, on a descriptor of tmp opened without
// O_CREATE (a lock never makes a file). It fails with errTempTaken if tmp
// is gone, is locked (by its export, or by another's
// removeStaleExportTemps), or no longer names the file locked (removed
// meanwhile).
func lockExportTemp(tmp string) (io.Closer, error) {
	f, err := os.OpenFile(tmp, os.O_RDWR, 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s: %w", errTempTaken, tmp, err)
	}
	if err != nil {
		return nil, err
	}
	lk := flockCloser{f}
	if err := flock(f, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s is locked", errTempTaken, tmp)
		}
		return nil, fmt.Errorf("lock %s: %w", tmp, err)
	}
	held, err := f.Stat()
	if err == nil {
		var named os.FileInfo
		if named, err = os.Lstat(tmp); err == nil && !os.SameFile(held, named) {
			err = fmt.Errorf("%w: %s was replaced", errTempTaken, tmp)
		}
	}
	if errors.Is(err, os.ErrNotExist) {
		err = fmt.Errorf("%w: %s: %w", errTempTaken, tmp, err)
	}
	if err != nil {
		lk.Close()
		return nil, err
	}
	return lk, nil
}

// flock runs flock(2) on f.
func flock(f *os.File, how int) error {
	c, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := c.Control(func(fd uintptr) {
		for {
			if ferr = unix.Flock(int(fd), how); ferr != unix.EINTR {
				return
			}
		}
	}); err != nil {
		return err
	}
	return ferr
}

// flockCloser releases its file's flock and closes it. The unlock comes
// first: a child forked meanwhile holds a copy of the descriptor until its
// exec, and the lock would live as long as it (vfs.OS's locks do the same).
type flockCloser struct{ f *os.File }

func (l flockCloser) Close() error {
	err := flock(l.f, unix.LOCK_UN)
	if cerr := l.f.Close(); err == nil {
		err = cerr
	}
	return err
}

// appendWriter writes to f, each Write after the last.
type appendWriter struct {
	f   vfs.File
	off int64
}

func (a *appendWriter) Write(p []byte) (int, error) {
	n, err := a.f.WriteAt(p, a.off)
	a.off += int64(n)
	return n, err
}

// testHookExporting, if set (by tests only: TestMain sets it in a child
// that a test interrupts), is called once the export has written a first
// part of the snapshot.
var testHookExporting func(ctx context.Context)

// hookWriter calls hook once, after the first write to w.
type hookWriter struct {
	w    io.Writer
	hook func()
}

func (h *hookWriter) Write(p []byte) (int, error) {
	n, err := h.w.Write(p)
	if h.hook != nil {
		hook := h.hook
		h.hook = nil
		hook()
	}
	return n, err
}

func runImport(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("import", "FILE DIR (FILE - for standard input)", stderr)
	asJSON := fs.Bool("json", false, "print one JSON document")
	if code := parseFlags(fs, args, stdout); code >= 0 {
		return code
	}
	if err := nArgs(fs, "FILE", "DIR"); err != nil {
		return argsFailed(fs, stdout, err)
	}
	file, dir := vfs.CleanPath(fs.Arg(0)), vfs.CleanPath(fs.Arg(1))
	if err := pathArg(fs, "FILE", file); err != nil {
		return argsFailed(fs, stdout, err)
	}
	if err := pathArg(fs, "DIR", dir); err != nil {
		return argsFailed(fs, stdout, err)
	}
	// kdb.Import refuses "." and "..", but kdbtool hands it an absolute
	// name (importPath): the store was built and renamed over the
	// directory the shell stands in, and the report's open of "." failed
	// (getwd: no such file or directory), exit 3.
	if cwdOrParent(dir) {
		return usageErr(fs, stdout, "DIR %s is the current directory or one of its parents, which import would replace with the new store: name a new directory (or an empty one by its name)", fs.Arg(1))
	}
	if _, err := os.Stat(filepath.Join(dir, "db.data")); err == nil {
		err := fmt.Errorf("%s already holds a store; import creates a new one", dir)
		return failed(stdout, stderr, "import", *asJSON, "", err, exitProblems)
	}
	f := os.Stdin // FILE -: the snapshot comes through a pipe
	if file != "-" {
		var err error
		if f, err = os.Open(file); err != nil {
			return failed(stdout, stderr, "import", *asJSON, "", err, exitIO)
		}
	}
	defer f.Close()
	// ctrl-C (or SIGTERM) stops the import at its next read of FILE (a
	// read waiting on a pipe is cut by closing it), and kdb.Import removes
	// the store it was building.
	ctx, stop := onInterrupt()
	defer stop()
	context.AfterFunc(ctx, func() { f.Close() })
	// kdb.Import builds the store in a temporary directory beside DIR and
	// renames it into place once it is whole and closed (its Close's
	// checkpoint syncs the journal): a failed, killed or crashed import
	// leaves no DIR, and the next import removes its leftover.
	// The store being built carries a mark (importMark) until just before
	// it is renamed into place: a staging directory a kill leaves beside
	// DIR is refused by every kdbtool command, never taken for a store.
	target, err := importPath(dir)
	var rep *kdb.ExportReport
	if err == nil {
		rep, err = kdb.Import(target, ctxReader{ctx, f}, &kdb.Options{Sync: kdb.UnsafeSyncNever, FS: &markImportFS{FS: vfs.OS, target: target}})
	}
	warnings := []string{}
	if rep != nil && rep.StaleRemoved > 0 {
		warnings = append(warnings, fmt.Sprintf("removed what %d interrupted import(s) into %s left (%s)",
			rep.StaleRemoved, dir, filepath.Join(filepath.Dir(filepath.Clean(dir)), "."+filepath.Base(filepath.Clean(dir))+".import-*")))
	}
	for _, w := range warnings {
		fmt.Fprintf(stderr, "kdbtool import: %s\n", w)
	}
	switch {
	case err == nil:
	case ctx.Err() != nil:
		// The snapshot's read was cut: whatever Import said of it.
		err = fmt.Errorf("%w: the store being built was removed; %s was not created", errInterrupted, dir)
		return failed(stdout, stderr, "import", *asJSON, "", err, exitInterrupted)
	case errors.Is(err, kdb.ErrCorrupt) || errors.Is(err, kdb.ErrVersionMismatch):
		return failed(stdout, stderr, "import", *asJSON, file+": "+errBadSnapshot.Error()+": ", err, exitProblems)
	case errors.Is(err, kdb.ErrNotEmpty):
		err = fmt.Errorf("%w; import creates a new store in a new or empty directory", err)
		return failed(stdout, stderr, "import", *asJSON, "", err, exitProblems)
	case errors.Is(err, kdb.ErrLocked):
		// Another import into DIR is running: DIR is in use, as a store
		// that exists is (ErrNotEmpty above); this one touched nothing.
		return failed(stdout, stderr, "import", *asJSON, "", err, exitProblems)
	case errors.Is(err, kdb.ErrInvalid):
		failed(stdout, stderr, "import", *asJSON, "", err, exitUsage)
		fs.Usage()
		return exitUsage
	default:
		return failed(stdout, stderr, "import", *asJSON, file+": ", err, exitFor(err))
	}
	out := &exportOut{File: file, Version: 1, Trees: rep.Trees, Keys: rep.Keys, Bytes: rep.Bytes, Warnings: warnings}
	db, err := kdb.Open(dir, &kdb.Options{ReadOnly: true})
	if err == nil {
		err = summarize(db, out)
		if cerr := db.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		return failed(stdout, stderr, "import", *asJSON, "", err, exitFor(err))
	}
	if *asJSON {
		return writeJSON(stdout, out)
	}
	fmt.Fprintf(stdout, "imported %s into %s: %d trees, %d keys; %d indexes, %d destinations, %d subscriptions, %d messages, %d prepared transactions\n",
		file, dir, out.Trees, out.Keys, out.Indexes, out.Destinations, out.Subscriptions, out.Messages, out.Prepared)
	return exitOK
}

// importMark is the file a store kdbtool import is building holds until it
// is complete: a staging directory (.DIR.import-...) that a killed import
// left holds part of the snapshot at most, and kdbtool refuses it
// (storeExists) rather than call it a healthy store. Written before any
// file of the store, removed (durably) just before the rename that puts
// the store in place.
const importMark = "KDBTOOL-IMPORT-UNFINISHED"

// errUnfinishedImport: the directory holds importMark.
var errUnfinishedImport = errors.New("an unfinished import")

// markImportFS is the OS file system for kdb.Import into target, which
// adds importMark to the store it builds: at the first file it opens in
// its staging directory (where the store is created, db.data first),
// and removes it at the rename of that directory to target.
type markImportFS struct {
	vfs.FS
	target string
	marked string // the staging directory marked, "" until then
}

// staging reports whether dir is a staging directory of an import into
// target (kdb.Import's name for it: .BASE.import- and hex digits).
func (m *markImportFS) staging(dir string) bool {
	prefix := "." + filepath.Base(m.target) + ".import-"
	return filepath.Dir(dir) == filepath.Dir(m.target) && strings.HasPrefix(filepath.Base(dir), prefix) &&
		len(filepath.Base(dir)) > len(prefix)
}

func (m *markImportFS) OpenFile(name string, flag int, perm os.FileMode) (vfs.File, error) {
	if dir := filepath.Dir(name); m.marked == "" && m.staging(dir) {
		mark := filepath.Join(dir, importMark)
		msg := "This directory holds a store that kdbtool import was building and never finished (killed or failed): it holds part of the snapshot at most. Delete the directory and import again.\n"
		if err := writeSynced(mark, []byte(msg)); err != nil {
			return nil, fmt.Errorf("marking %s as an unfinished import: %w", dir, err)
		}
		if err := m.FS.SyncDir(dir); err != nil {
			return nil, fmt.Errorf("marking %s as an unfinished import: %w", dir, err)
		}
		m.marked = dir
	}
	return m.FS.OpenFile(name, flag, perm)
}

func (m *markImportFS) Rename(oldname, newname string) error {
	if oldname == m.marked && m.marked != "" && newname == m.target {
		// INVARIANT: Import renames its staging directory to target only
		// once the store in it is complete and closed.
		if err := m.FS.Remove(filepath.Join(oldname, importMark)); err != nil {
			return fmt.Errorf("removing the mark of an unfinished import from %s: %w", oldname, err)
		}
		if err := m.FS.SyncDir(oldname); err != nil {
			return err
		}
	}
	return m.FS.Rename(oldname, newname)
}

// LockDir keeps the lock of a store's directory (vfs.LockStore) that
// vfs.OS takes.
func (m *markImportFS) LockDir(dir string) (vfs.Locker, error) {
	return m.FS.(vfs.DirLocker).LockDir(dir)
}

// writeSynced creates (or truncates) name with b and fsyncs it.
func writeSynced(name string, b []byte) error {
	w, err := os.OpenFile(name, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	_, err = w.Write(b)
	if err == nil {
		err = w.Sync()
	}
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	return err
}

// importPath is dir as kdb.Import takes it on vfs.OS, which it does not
// with the file system of markImportFS: a symbolic link stands for the
// directory it points to, the name is absolute, and the links in its
// nearest existing parent are resolved (so that Import sees a parent that
// is, through a link, a store's directory).
func importPath(dir string) (string, error) {
	if st, err := os.Lstat(dir); err == nil && st.Mode()&os.ModeSymlink != 0 {
		real, err := filepath.EvalSymlinks(dir)
		if err != nil {
			return "", fmt.Errorf("%w: Import: %s is a symbolic link to nothing (%v): name a new directory, or make the one it names", kdb.ErrInvalid, dir, err)
		}
		dir = real
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	d, rest := filepath.Dir(abs), filepath.Base(abs)
	for {
		if st, err := os.Stat(d); err == nil && st.IsDir() {
			break
		}
		up := filepath.Dir(d)
		if up == d {
			return abs, nil
		}
		d, rest = up, filepath.Join(filepath.Base(d), rest)
	}
	real, err := filepath.EvalSymlinks(d)
	if err != nil {
		return "", err
	}
	return filepath.Join(real, rest), nil
}
