package storefile

import "testing"

func TestIs(t *testing.T) {
	for _, name := range []string{"db.data", "db.redo", "db.free", "db.free.prev", "lock",
		"db.free.tmp", "db-7.log", "db-7.log.tmp", "db.data.broken", "db.free.broken.3", "db-12.log.broken.tmp"} {
		if !Is(name) {
			t.Errorf("Is(%q) = false", name)
		}
	}
	for _, name := range []string{"archive", "db", "db-0.log", "db-07.log", "db.data2", "db.free.broken.x", "x.tmp", ""} {
		if Is(name) {
			t.Errorf("Is(%q) = true", name)
		}
	}
}
