package trace

import (
	"bufio"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"
)

// An RMM logging_resource_adaptor log is a CSV file with the header
// Thread,Time,Action,Pointer,Size,Stream. Thread is spdlog's decimal thread id; Time is either
// spdlog's "%H:%M:%S.%f" time of day (microseconds) or seconds since the epoch with a
// fraction; Action is "allocate", "free" ("deallocate" in some versions) or "allocate failure";
// Pointer and Stream are hexadecimal, with or without "0x"; Size is decimal bytes.

var rmmColumns = []string{"Thread", "Time", "Action", "Pointer", "Size", "Stream"}

// rmmSource streams the rows of an RMM log.
type rmmSource struct {
	r        *Reader
	csv      *csv.Reader
	closer   io.Closer
	skipBad  bool
	seq      uint64
	bigTIDs  map[uint64]uint32 // thread ids too large for 32 bits → small ids
	lastTime int64             // for time-of-day wrap-around at midnight
	dayNs    int64             // days added after wrap-arounds
	started  bool
	counter  *countingReader
	size     int64
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

func (s *rmmSource) progress() (done, total int64) { return s.counter.n, s.size }

func (r *Reader) openRMM(in readAtSeeker, size int64, closer io.Closer, cfg readConfig) error {
	counter := &countingReader{r: io.NewSectionReader(in, 0, size)}
	cr := csv.NewReader(bufio.NewReaderSize(counter, 1<<20))
	cr.FieldsPerRecord = -1 // checked below for the header, then by the csv reader
	cr.ReuseRecord = true
	cr.TrimLeadingSpace = true
	header, err := cr.Read()
	if err != nil {
		return csvError(err)
	}
	ok := len(header) == len(rmmColumns)
	for i := 0; ok && i < len(header); i++ {
		ok = strings.TrimPrefix(strings.TrimSpace(header[i]), "\ufeff") == rmmColumns[i]
	}
	if !ok {
		return fmt.Errorf("line 1: header %q, want %s", strings.Join(header, ","), strings.Join(rmmColumns, ","))
	}
	cr.FieldsPerRecord = len(rmmColumns)
	r.info = Info{Source: SourceRMMCSV}
	r.src = &rmmSource{r: r, csv: cr, closer: closer, skipBad: cfg.skipBadRows, counter: counter, size: size}
	return nil
}

func csvError(err error) error {
	var pe *csv.ParseError
	if errors.As(err, &pe) {
		return fmt.Errorf("line %d: %w", pe.Line, pe.Err)
	}
	if err == io.EOF {
		return errors.New("line 1: no CSV header")
	}
	return err
}

func (s *rmmSource) close() error {
	if s.closer != nil {
		return s.closer.Close()
	}
	return nil
}

func (s *rmmSource) next(buf []Event) ([]Event, error) {
	for len(buf) < maxBatch {
		rec, err := s.csv.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			var pe *csv.ParseError
			if s.skipBad && errors.As(err, &pe) && pe.Err == csv.ErrFieldCount {
				s.r.warnf("line %d: skipped: %v", pe.Line, pe.Err)
				continue
			}
			return nil, csvError(err)
		}
		line, _ := s.csv.FieldPos(0)
		e, err := s.parseRow(rec)
		if err != nil {
			if s.skipBad {
				s.r.warnf("line %d: skipped: %v", line, err)
				continue
			}
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		e.Seq = s.seq
		s.seq++
		buf = append(buf, e)
	}
	if len(buf) == 0 {
		return nil, io.EOF
	}
	return buf, nil
}

func (s *rmmSource) parseRow(rec []string) (Event, error) {
	e := Event{Device: -1, Layer: LayerFramework, Memory: MemoryDevice}
	thread, err := strconv.ParseUint(strings.TrimSpace(rec[0]), 10, 64)
	if err != nil {
		return e, fmt.Errorf("column Thread: bad thread id %q", rec[0])
	}
	e.TID = s.tid(thread)
	if e.TimeNs, err = s.parseTime(strings.TrimSpace(rec[1])); err != nil {
		return e, fmt.Errorf("column Time: %w", err)
	}
	switch action := strings.TrimSpace(rec[2]); action {
	case "allocate":
		e.Op, e.Function = OpAlloc, FuncRMMAllocate
	case "allocate failure":
		e.Op, e.Function, e.Result = OpAlloc, FuncRMMAllocate, cudaErrorMemoryAllocation
	case "free", "deallocate":
		e.Op, e.Function = OpFree, FuncRMMFree
	default:
		return e, fmt.Errorf("column Action: unknown action %q", action)
	}
	if e.Address, err = parseHex(rec[3]); err != nil {
		return e, fmt.Errorf("column Pointer: %w", err)
	}
	if e.Size, err = strconv.ParseUint(strings.TrimSpace(rec[4]), 10, 64); err != nil {
		return e, fmt.Errorf("column Size: bad size %q", rec[4])
	}
	if e.Stream, err = parseHex(rec[5]); err != nil {
		return e, fmt.Errorf("column Stream: %w", err)
	}
	return e, nil
}

// tid keeps thread ids that fit 32 bits and numbers the others 1, 2, ... in order of appearance.
func (s *rmmSource) tid(thread uint64) uint32 {
	if thread <= math.MaxUint32 {
		return uint32(thread)
	}
	if s.bigTIDs == nil {
		s.bigTIDs = map[uint64]uint32{}
	}
	id, ok := s.bigTIDs[thread]
	if !ok {
		id = uint32(len(s.bigTIDs) + 1)
		s.bigTIDs[thread] = id
	}
	return id
}

// parseHex parses a hexadecimal pointer such as "0x7f8a40000000", "7f8a40000000" or "(nil)".
func parseHex(v string) (uint64, error) {
	v = strings.TrimSpace(v)
	if v == "(nil)" {
		return 0, nil
	}
	digits := strings.TrimPrefix(strings.TrimPrefix(v, "0x"), "0X")
	x, err := strconv.ParseUint(digits, 16, 64)
	if err != nil || digits == "" {
		return 0, fmt.Errorf("bad hexadecimal value %q", v)
	}
	return x, nil
}

// parseTime returns ns since midnight (plus a day per wrap-around) for "HH:MM:SS.ffffff", or
// ns since the epoch for "seconds.fraction".
func (s *rmmSource) parseTime(v string) (int64, error) {
	if !strings.Contains(v, ":") {
		ns, err := parseSeconds(v)
		if err != nil {
			return 0, err
		}
		if !s.started {
			s.started = true
			s.r.info.StartTime = time.Unix(0, ns).UTC()
		}
		return ns, nil
	}
	parts := strings.Split(v, ":")
	if len(parts) != 3 {
		return 0, fmt.Errorf("bad time %q, want HH:MM:SS.ffffff", v)
	}
	h, err1 := strconv.ParseUint(parts[0], 10, 8)
	m, err2 := strconv.ParseUint(parts[1], 10, 8)
	sec, err3 := parseSeconds(parts[2])
	if err1 != nil || err2 != nil || err3 != nil || h > 23 || m > 59 || sec >= 61e9 {
		return 0, fmt.Errorf("bad time %q, want HH:MM:SS.ffffff", v)
	}
	ns := int64(h)*int64(time.Hour) + int64(m)*int64(time.Minute) + sec
	if s.started && ns+12*int64(time.Hour) < s.lastTime {
		s.dayNs += 24 * int64(time.Hour) // the log crossed midnight
	}
	s.started = true
	s.lastTime = ns
	return ns + s.dayNs, nil
}

// parseSeconds parses "S" or "S.fraction" (up to 9 fraction digits) into ns.
func parseSeconds(v string) (int64, error) {
	whole, frac, _ := strings.Cut(v, ".")
	sec, err := strconv.ParseUint(whole, 10, 64)
	if err != nil || sec > math.MaxInt64/1_000_000_000-1 || len(frac) > 9 {
		return 0, fmt.Errorf("bad seconds %q", v)
	}
	var fracNs uint64
	if frac != "" {
		if fracNs, err = strconv.ParseUint(frac, 10, 64); err != nil {
			return 0, fmt.Errorf("bad seconds %q", v)
		}
		for i := len(frac); i < 9; i++ {
			fracNs *= 10
		}
	}
	return int64(sec)*1e9 + int64(fracNs), nil
}
