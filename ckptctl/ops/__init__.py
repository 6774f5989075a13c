"""Operations behind the commands: pure functions returning reports."""
