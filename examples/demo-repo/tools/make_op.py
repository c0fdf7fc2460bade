"""Write one calculator operation and its unit test: the demo's stand-in for an agent's change."""

import sys
from pathlib import Path

name, expression = sys.argv[1], sys.argv[2]
cases = [tuple(int(x) for x in case.split(",")) for case in sys.argv[3:]]
Path("calc", f"{name}.py").write_text(
    f'"""{name}: a {expression}."""\n\n\ndef {name}(a, b):\n    return {expression}\n')
checks = "\n".join(f"        self.assertEqual({name}({a}, {b}), {want})" for a, b, want in cases)
Path("tests", f"test_{name}.py").write_text(
    f"import unittest\n\nfrom calc.{name} import {name}\n\n\n"
    f"class Test{name.title()}(unittest.TestCase):\n"
    f"    def test_{name}(self):\n{checks}\n\n\n"
    "if __name__ == '__main__':\n    unittest.main()\n"
)
print(f"wrote calc/{name}.py and tests/test_{name}.py")
