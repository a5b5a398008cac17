package pool

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// LoadConfig reads and validates a pool.json file. Its errors name the file and the position:
// `pool.json: line 3 col 15: ...` for malformed JSON, `pool.json: size_class.classes[1]...: ...`
// for a value that fails Validate.
func LoadConfig(path string) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("read pool config: %w", err)
	}
	return parseConfig(path, data)
}

// parseConfig decodes and validates pool.json content; name is used in errors.
func parseConfig(name string, data []byte) (Config, error) {
	var cfg Config
	if len(bytes.TrimSpace(data)) == 0 {
		return Config{}, fmt.Errorf("%s: empty file", name)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&cfg); err != nil {
		return Config{}, fmt.Errorf("%s: %w", name, jsonError(data, err))
	}
	if _, err := dec.Token(); err != io.EOF {
		off := dec.InputOffset()
		return Config{}, fmt.Errorf("%s: %s: data after the config object", name, position(data, off-1))
	}
	if err := cfg.Validate(); err != nil {
		return Config{}, fmt.Errorf("%s: %w", name, err)
	}
	return cfg, nil
}

// jsonError turns a decoding error into "line L col C: what".
func jsonError(data []byte, err error) error {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return fmt.Errorf("%s: %w", position(data, syn.Offset-1), err)
	case errors.As(err, &typ):
		what := fmt.Sprintf("%s: cannot use %s as %s", typ.Field, typ.Value, typ.Type)
		return fmt.Errorf("%s: %s", position(data, valueStart(data, typ.Offset)), what)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Errorf("%s: unexpected end of file", position(data, int64(len(data))-1))
	}
	const unknown = "json: unknown field "
	if msg := err.Error(); len(msg) > len(unknown) && msg[:len(unknown)] == unknown {
		field := msg[len(unknown):]
		return fmt.Errorf("%s: unknown field %s", position(data, keyOffset(data, field)), field)
	}
	return err
}

// position formats the 0-based byte offset off as "line L col C" (1-based; col counts bytes).
func position(data []byte, off int64) string {
	off = max(0, min(off, int64(len(data))-1))
	line := 1 + bytes.Count(data[:off], []byte{'\n'})
	col := off + 1
	if nl := bytes.LastIndexByte(data[:off], '\n'); nl >= 0 {
		col = off - int64(nl)
	}
	return fmt.Sprintf("line %d col %d", line, col)
}

// valueStart returns the offset of the first byte of the JSON value that ends at end.
func valueStart(data []byte, end int64) int64 {
	dec := json.NewDecoder(bytes.NewReader(data))
	prev := int64(0)
	for {
		if _, err := dec.Token(); err != nil {
			return end - 1
		}
		if dec.InputOffset() >= end {
			return skipSeparators(data, prev)
		}
		prev = dec.InputOffset()
	}
}

// keyOffset returns the offset of the first object key spelled quoted (a JSON string with its
// quotes), or 0.
func keyOffset(data []byte, quoted string) int64 {
	dec := json.NewDecoder(bytes.NewReader(data))
	prev := int64(0)
	for {
		tok, err := dec.Token()
		if err != nil {
			return 0
		}
		if s, ok := tok.(string); ok && fmt.Sprintf("%q", s) == quoted {
			return skipSeparators(data, prev)
		}
		prev = dec.InputOffset()
	}
}

func skipSeparators(data []byte, off int64) int64 {
	for off < int64(len(data)) && bytes.IndexByte([]byte(" \t\r\n:,"), data[off]) >= 0 {
		off++
	}
	return off
}

// Save validates the config and writes it to path as indented JSON, replacing the file atomically.
func (c Config) Save(path string) error {
	if err := c.Validate(); err != nil {
		return fmt.Errorf("save %s: %w", path, err)
	}
	data, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return fmt.Errorf("save %s: %w", path, err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".pool-*.json")
	if err != nil {
		return fmt.Errorf("save %s: %w", path, err)
	}
	_, werr := tmp.Write(append(data, '\n'))
	cerr := tmp.Close()
	if err := errors.Join(werr, cerr); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("save %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("save %s: %w", path, err)
	}
	return nil
}
