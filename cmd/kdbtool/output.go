package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/journal"
	"github.com/kdb-project/kdb/pagefile"
)

// writeJSON prints v as one indented JSON document.
func writeJSON(w io.Writer, v any) int {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return exitIO
	}
	return exitOK
}

// isCorrupt reports whether err is about damaged bytes on disk (exit 1)
// rather than an I/O or environment error (exit 3).
func isCorrupt(err error) bool {
	return errors.Is(err, kdb.ErrCorrupt) || errors.Is(err, pagefile.ErrCorrupt) ||
		errors.Is(err, journal.ErrCorrupt) || errors.Is(err, journal.ErrTornTail) ||
		errors.Is(err, kdb.ErrVersionMismatch) || errors.Is(err, pagefile.ErrVersionMismatch) ||
		errors.Is(err, journal.ErrVersionMismatch)
}

// exitFor maps an error to an exit code: 1 for corruption, 3 otherwise.
func exitFor(err error) int {
	if isCorrupt(err) {
		return exitProblems
	}
	return exitIO
}

// errString is err's message, or "" for nil.
func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// isTerminal reports whether w is a terminal (a character device).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// progress prints a counter on stderr at most every 200ms, and only when
// stderr is a terminal. A nil *progress is valid and prints nothing.
type progress struct {
	w    io.Writer
	what string
	mu   sync.Mutex
	n    uint64
	last time.Time
}

func newProgress(stderr io.Writer, what string) *progress {
	if !isTerminal(stderr) {
		return nil
	}
	return &progress{w: stderr, what: what}
}

// add counts n more items.
func (p *progress) add(n uint64) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.n += n
	if now := time.Now(); now.Sub(p.last) >= 200*time.Millisecond {
		p.last = now
		fmt.Fprintf(p.w, "\r%s: %d", p.what, p.n)
	}
}

// done clears the progress line.
func (p *progress) done() {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.w, "\r%s: %d done\n", p.what, p.n)
}

// oneArg parses the single DIR argument of a subcommand.
func oneArg(fs *flag.FlagSet) (string, bool) {
	if fs.NArg() != 1 {
		fs.Usage()
		return "", false
	}
	return fs.Arg(0), true
}

// storeExists reports whether dir holds a store (db.data), so that the
// read-only subcommands never create one. A directory that lost its
// db.data but still holds what only a store leaves (journal segments,
// db.free, db.redo) is ErrCorrupt (exit 1), with kdb.Open's explanation.
func storeExists(dir string) error {
	_, err := os.Stat(filepath.Join(dir, "db.data"))
	if err == nil {
		return nil
	}
	if errors.Is(err, os.ErrNotExist) {
		// A read-only Open creates and writes nothing; it refuses such a
		// directory with ErrCorrupt.
		db, oerr := kdb.Open(dir, &kdb.Options{ReadOnly: true})
		if oerr == nil {
			return db.Close() // db.data appeared meanwhile
		}
		if errors.Is(oerr, kdb.ErrCorrupt) {
			return oerr
		}
	}
	return fmt.Errorf("%s is not a kdb store: %w", dir, err)
}

// dataLost reports whether dir is a store that lost its db.data (storeExists
// says ErrCorrupt, and db.data does not exist), and the explanation.
func dataLost(dir string) (bool, error) {
	if _, err := os.Stat(filepath.Join(dir, "db.data")); !errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	err := storeExists(dir)
	return errors.Is(err, kdb.ErrCorrupt), err
}

func errIsNotFound(err error) bool { return errors.Is(err, kdb.ErrNotFound) }
