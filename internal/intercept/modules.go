package intercept

import (
	"bufio"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/allocscope/allocscope/internal/buildid"
	"github.com/allocscope/allocscope/trace"
)

// Modules returns the executable mappings the recorded processes saved beside their logs
// (<pid>-<start>.maps, as /proc/PID/maps lines, one copy per save: at start, before a dlclose, at
// exit), each mapping once, with the build ID of its file as it is now, for naming callsites. A
// process that saved none (killed before its shim wrote them) has none; malformed lines are skipped.
func (l *Logs) Modules() []trace.Module {
	var mods []trace.Module
	for _, lf := range l.files {
		path := strings.TrimSuffix(lf.f.Name(), ".alog") + ".maps"
		mods = append(mods, readMaps(path, lf.log.header.PID)...)
	}
	return withBuildIDs(mods)
}

// withBuildIDs fills in each module's build ID, reading each file once.
func withBuildIDs(mods []trace.Module) []trace.Module {
	ids := map[string]string{}
	for i := range mods {
		id, ok := ids[mods[i].Path]
		if !ok {
			id = buildid.Of(mods[i].Path)
			ids[mods[i].Path] = id
		}
		mods[i].BuildID = id
	}
	return mods
}

// readMaps reads one maps file.
func readMaps(path string, pid uint32) []trace.Module {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	return parseMaps(f, pid)
}

// parseMaps reads "start-end perms offset dev inode path" lines; a line too long for the scanner
// ends the reading.
func parseMaps(r io.Reader, pid uint32) []trace.Module {
	var mods []trace.Module
	seen := map[trace.Module]bool{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 || !strings.HasPrefix(fields[5], "/") {
			continue
		}
		lo, hi, ok := strings.Cut(fields[0], "-")
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		off, err3 := strconv.ParseUint(fields[2], 16, 64)
		if !ok || err1 != nil || err2 != nil || err3 != nil || end <= start {
			continue
		}
		m := trace.Module{PID: pid, Start: start, End: end, Offset: off, Path: strings.Join(fields[5:], " ")}
		if !seen[m] { // the saves repeat what is still mapped
			seen[m] = true
			mods = append(mods, m)
		}
	}
	return mods
}
