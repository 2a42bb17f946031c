"""Declarative scenario tests: cases as data (cases/*.yaml), one runner, shared invariants."""
