"""The .cast format and its runtime. Imports only torch and the standard library."""
