package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/broker"
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
	fs := newFlags("export", "DIR FILE", stderr)
	asJSON := fs.Bool("json", false, "print one JSON document")
	if code := parseFlags(fs, args); code >= 0 {
		return code
	}
	if fs.NArg() != 2 {
		fs.Usage()
		return exitUsage
	}
	dir, file := fs.Arg(0), fs.Arg(1)
	if err := storeExists(dir); err != nil {
		fmt.Fprintf(stderr, "kdbtool export: %v\n", err)
		return exitFor(err)
	}
	out, err := retryLive(dir, func() (*exportOut, bool, error) {
		out := &exportOut{File: file, Version: 1, Warnings: []string{}}
		db, err := kdb.Open(dir, &kdb.Options{ReadOnly: true})
		if err != nil {
			return out, false, err
		}
		defer db.Close()
		if err := exportStore(db, file, out); err != nil {
			return out, false, err
		}
		err = summarize(db, out)
		return out, err == nil, err
	})
	if err != nil {
		fmt.Fprintf(stderr, "kdbtool export: %v\n", err)
		return exitFor(err)
	}
	if *asJSON {
		return writeJSON(stdout, out)
	}
	fmt.Fprintf(stdout, "exported to %s (%s): %d trees, %d keys; %d indexes, %d destinations, %d subscriptions, %d messages, %d prepared transactions\n",
		file, exportFormatName, out.Trees, out.Keys, out.Indexes, out.Destinations, out.Subscriptions, out.Messages, out.Prepared)
	return exitOK
}

// exportStore writes the snapshot to a new temporary file in file's
// directory, syncs it, renames it over file and syncs the directory. On
// return (nil) the file is durable. The temporary file is created
// exclusively (O_CREATE|O_EXCL: never an existing file, never through a
// symlink) with a random name and mode 0600, so nothing planted in the
// directory (a file.tmp symlink, a foreign file) is ever written through or
// clobbered; a failed export removes only the file it created.
func exportStore(db *kdb.DB, file string, out *exportOut) error {
	dir := filepath.Dir(file)
	f, err := os.CreateTemp(dir, "."+filepath.Base(file)+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	rep, err := db.Export(f)
	if err == nil {
		err = f.Chmod(0o600) // CreateTemp's mode; kept explicit
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, file)
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	if err := syncDir(dir); err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	out.Trees, out.Keys, out.Bytes = rep.Trees, rep.Keys, rep.Bytes
	return nil
}

func runImport(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("import", "FILE DIR", stderr)
	asJSON := fs.Bool("json", false, "print one JSON document")
	if code := parseFlags(fs, args); code >= 0 {
		return code
	}
	if fs.NArg() != 2 {
		fs.Usage()
		return exitUsage
	}
	file, dir := fs.Arg(0), fs.Arg(1)
	if _, err := os.Stat(filepath.Join(dir, "db.data")); err == nil {
		fmt.Fprintf(stderr, "kdbtool import: %s already holds a store; import creates a new one\n", dir)
		return exitProblems
	}
	f, err := os.Open(file)
	if err != nil {
		fmt.Fprintf(stderr, "kdbtool import: %v\n", err)
		return exitIO
	}
	defer f.Close()
	_, statErr := os.Stat(dir)
	created := errors.Is(statErr, os.ErrNotExist)
	// The journal is synced by the checkpoint Import's Close takes: a crash
	// during import means importing again into a new directory.
	rep, err := kdb.Import(dir, f, &kdb.Options{Sync: kdb.UnsafeSyncNever})
	if err != nil {
		if created {
			// Leave no half-imported store behind.
			os.RemoveAll(dir)
		}
		if errors.Is(err, kdb.ErrCorrupt) || errors.Is(err, kdb.ErrVersionMismatch) {
			fmt.Fprintf(stderr, "kdbtool import: %s: %v: %v\n", file, errBadSnapshot, err)
			return exitProblems
		}
		fmt.Fprintf(stderr, "kdbtool import: %s: %v\n", file, err)
		return exitFor(err)
	}
	out := &exportOut{File: file, Version: 1, Trees: rep.Trees, Keys: rep.Keys, Bytes: rep.Bytes, Warnings: []string{}}
	db, err := kdb.Open(dir, &kdb.Options{ReadOnly: true})
	if err == nil {
		err = summarize(db, out)
		if cerr := db.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "kdbtool import: %v\n", err)
		return exitFor(err)
	}
	if *asJSON {
		return writeJSON(stdout, out)
	}
	fmt.Fprintf(stdout, "imported %s into %s: %d trees, %d keys; %d indexes, %d destinations, %d subscriptions, %d messages, %d prepared transactions\n",
		file, dir, out.Trees, out.Keys, out.Indexes, out.Destinations, out.Subscriptions, out.Messages, out.Prepared)
	return exitOK
}
