#!/usr/bin/env bash
python3 -c "from grader.rubric import grade; print(min(s for s in range(101) if grade(s) == 'B'))" > answer.txt
