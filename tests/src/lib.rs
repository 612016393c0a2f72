//! End-to-end tests across the bmoe programs live in `tests/tests/`; this library holds shared helpers.
